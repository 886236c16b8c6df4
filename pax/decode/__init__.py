"""Decoding: text from a trained run's checkpoints (pax.main --mode=decode_once | decode)."""
