"""Checkpoints: orbax (tensorstore, OCDBT) in Pax's job-directory layout."""
