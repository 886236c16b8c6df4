"""Python environments built from a lock: pip, the pinned `.venv/pax-<release>-<platform>`
envs, a hash-checked wheel cache and package-index reading. No jax."""
