"""Small C4-format shards and a tiny SentencePiece model, made once per test session."""

import pytest


@pytest.fixture(scope="session")
def shards(tmp_path_factory):
    """4 train shards and 1 validation shard of 32 documents each (CPython's pydoc text)."""
    c4 = pytest.importorskip("pax.data.c4")  # grain: release 1.5.0 on
    directory = tmp_path_factory.mktemp("c4")
    c4.write_sample_shards(str(directory), train_shards=4, validation_shards=1, docs_per_shard=32)
    return directory


@pytest.fixture(scope="session")
def spm_model(shards, tmp_path_factory):
    """A 300-piece SentencePiece model trained on the train shards by `python -m pax.data spm`."""
    pytest.importorskip("sentencepiece")
    from pax.data.cli import main

    prefix = tmp_path_factory.mktemp("spm") / "c4_300"
    assert (
        main(
            [
                "spm",
                *map(str, sorted(shards.glob("c4-train.*"))),
                "--model_prefix",
                str(prefix),
                "--vocab_size",
                "300",
            ]
        )
        == 0
    )
    return f"{prefix}.model"
