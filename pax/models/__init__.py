"""Models: the decoder-only Transformer LM."""
