"""Pax: experiments on JAX as configuration, with a reproducible distribution."""

import importlib.metadata
import tomllib

from pax import paths


def _version() -> str:
    """The installed package's version, or the checkout's pyproject.toml when run from source
    (the release cut sets both to the release's number)."""
    pyproject = paths.ROOT / "pyproject.toml"
    if pyproject.is_file():
        with open(pyproject, "rb") as f:
            return tomllib.load(f)["project"]["version"]
    try:
        return importlib.metadata.version("pax")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


__version__ = _version()
