"""./noxw's bootstrap: pip installs uv alone, from the tools lock's own hashed line, and uv
installs the rest of the lock."""

import importlib.machinery
import importlib.util

import pytest

from pax import lockfile
from pax.paths import ROOT


def _noxw():
    loader = importlib.machinery.SourceFileLoader("noxw", str(ROOT / "noxw"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("noxw", loader))
    loader.exec_module(module)
    return module


def test_the_uv_requirement_is_the_locks_own_pin_with_every_hash():
    noxw = _noxw()
    text = noxw.LOCK.read_text()
    entry = noxw.lock_entry(text, "uv")
    pins = lockfile.parse_lockfile_text(entry)
    assert list(pins) == ["uv"]
    assert pins["uv"] == lockfile.parse_lockfile_text(text)["uv"]
    assert pins["uv"].hashes and not any(
        line.lstrip().startswith("#") for line in entry.splitlines()
    )


def test_a_lock_without_uv_is_refused():
    with pytest.raises(ValueError, match="pins no uv"):
        _noxw().lock_entry("nox==2026.10.20 \\\n    --hash=sha256:00\n", "uv")
