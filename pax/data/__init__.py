"""Input: data sources, tokenizers and the deterministic batching over them."""
from pax.data.sources import build

__all__ = ['build']
