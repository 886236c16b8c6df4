"""The embedded corpus is CPython 3.11.7's pydoc topics, the same text on every interpreter."""

import glob
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pax.data import corpus
from pax.errors import PaxError
from pax.paths import ROOT


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7), reason="the text is CPython 3.11.7's")
def test_the_corpus_is_the_interpreters_own_pydoc_topics_on_cpython_3_11_7():
    # The truth outside the project: the module CPython 3.11.7 ships (Lib/pydoc_data/topics.py),
    # joined in sorted key order as the reference bands' runs read it.
    from pydoc_data import topics

    assert corpus.embedded_text() == "".join(topics.topics[k] for k in sorted(topics.topics))


def _other_interpreters() -> list[str]:
    """CPython 3.12 and newer found on this machine (pyenv's versions, then PATH)."""
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    found = sorted(glob.glob(f"{root}/versions/3.1[2-9]*/bin/python3"))
    return found or [p for v in ("3.12", "3.13") if (p := shutil.which(f"python{v}"))]


def test_every_interpreter_reads_the_same_text_though_its_own_pydoc_topics_differ():
    interpreters = _other_interpreters()
    if not interpreters:
        pytest.skip("no CPython 3.12 or newer on this machine")
    # corpus.py alone, by its path: the bare interpreter has no jax for pax.data's package.
    script = (
        "import hashlib, importlib.util as u; from pydoc_data import topics; "
        f"s = u.spec_from_file_location('corpus', {str(corpus.__file__)!r}); "
        "corpus = u.module_from_spec(s); s.loader.exec_module(corpus); "
        "own = ''.join(topics.topics[k] for k in sorted(topics.topics)); "
        "print(hashlib.sha256(corpus.embedded_text().encode()).hexdigest(), "
        "hashlib.sha256(own.encode()).hexdigest())"
    )
    ours = _sha256(corpus.embedded_text())
    for python in interpreters:
        out = subprocess.run(
            [python, "-c", script],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert out[0] == ours, python
        # Why the text is kept in pax: the interpreter's own topics are other text.
        assert out[1] != ours, python


def test_a_damaged_corpus_file_is_named_not_trained_on(tmp_path, monkeypatch):
    data = bytearray(gzip.decompress(corpus.FILE.read_bytes()))
    data[len(data) // 2] ^= 0x01
    damaged = tmp_path / "pydoc_topics.txt.gz"
    damaged.write_bytes(gzip.compress(bytes(data), mtime=0))
    monkeypatch.setattr(corpus, "FILE", damaged)
    corpus.embedded_text.cache_clear()
    try:
        with pytest.raises(PaxError, match="not the embedded corpus"):
            corpus.embedded_text()
    finally:
        corpus.embedded_text.cache_clear()
