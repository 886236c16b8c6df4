"""Input: data sources, tokenizers and the deterministic batching over them."""

from pax.data.sources import build


def stream(dataset):
    """`dataset` if its position must be saved with checkpoints (a stream, as C4), else None;
    the embedded and synthetic sources draw batch i as a function of i and need nothing saved."""
    return dataset if hasattr(dataset, "get_state") else None


__all__ = ["build", "stream"]
