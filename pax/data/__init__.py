"""Input: data sources, tokenizers and the deterministic batching over them."""

from pax.data.sources import build


def stream(dataset):
    """`dataset` if its position must be saved with checkpoints (a stream, as C4), else None;
    the embedded and synthetic sources draw batch i as a function of i and need nothing saved."""
    return dataset if hasattr(dataset, "get_state") else None


def eval_exhausted(dataset, index: int, batch_size: int) -> bool:
    """Whether batch `index` lies past the end of a split whose length is known up front (the
    embedded corpus cut into windows); streams (C4) tell only once read (`exhausted`)."""
    count = getattr(dataset, "num_batches", lambda _: None)(batch_size)
    return count is not None and index >= count


__all__ = ["build", "eval_exhausted", "stream"]
