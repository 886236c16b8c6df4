"""Keeping compiled programs between runs on an accelerator: jax's persistent compilation cache.

Most of a short run's start on a TPU is compiling its steps; with the programs an earlier run of
the same experiment left in the cache, it starts on its first step that much sooner. XLA:CPU
compiles the CPU-sized runs in seconds (and the tests start many short ones), so a CPU run keeps
nothing unless asked to. PAX_COMPILATION_CACHE=DIR puts the cache elsewhere (on a CPU too),
`none` turns it off; jax's own JAX_COMPILATION_CACHE_DIR, where set, is left to jax.
"""

import os
from pathlib import Path
from typing import Optional

import jax

VARIABLE = "PAX_COMPILATION_CACHE"
DEFAULT = Path.home() / ".cache" / "pax" / "xla"


def enable(environ=None, backend: Optional[str] = None) -> Optional[str]:
    """Turns the cache on where it applies; returns its directory, or None where it is off."""
    environ = os.environ if environ is None else environ
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return environ["JAX_COMPILATION_CACHE_DIR"]  # jax read it at import
    chosen = environ.get(VARIABLE, "").strip()
    if chosen.lower() == "none":
        return None
    if not chosen and (backend or jax.default_backend()) == "cpu":
        return None
    directory = chosen or str(DEFAULT)
    jax.config.update("jax_compilation_cache_dir", directory)
    return directory
