"""The C4 reader on generated shards: records, splits, process shares, order, resume, bad input."""

import collections
import gzip
import json

import numpy as np
import pytest

c4 = pytest.importorskip("pax.data.c4")  # grain: release 1.5.0 on

from pax.data import tokenizers  # noqa: E402
from pax.errors import UsageError  # noqa: E402
from pax.experiments.config import DatasetConfig  # noqa: E402

SEQ_LEN, ROWS = 64, 4


def _docs(paths) -> list[str]:
    texts = []
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f]
    return texts


def _read(units, skip_bad=False) -> list[str]:
    return [r["text"] for unit in units for r in c4.UnitDataset(unit, skip_bad)]


def _dataset(data_dir, training=True, seed=7, policy="stop", process=(0, 1)):
    config = DatasetConfig(
        name="train" if training else "c4",
        source="c4",
        is_training=training,
        seq_len=SEQ_LEN,
        seed=seed,
        data_dir=str(data_dir),
        bad_record_policy=policy,
    )
    return c4.C4Dataset(config, tokenizers.ByteTokenizer(), *process)


def _batches(dataset, start, count, rows=ROWS):
    return [dataset.batch(i, rows) for i in range(start, start + count)]


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def test_reads_every_record_of_a_split(shards):
    for split in c4.SPLITS:
        paths = c4.list_shards(str(shards), split)
        assert [p.rsplit("/", 1)[1] for p in paths] == sorted(
            p.name for p in shards.glob(f"c4-{split}.*")
        )
        assert _read(c4.units_of(paths, 0, 1)) == _docs(paths)
    assert len(_docs(c4.list_shards(str(shards), "train"))) == 4 * 32


def test_train_and_validation_rows_come_from_their_own_split(shards):
    validation = "\n".join(_docs(shards.glob("c4-validation.*")))
    train = "\n".join(_docs(shards.glob("c4-train.*")))
    tok = tokenizers.ByteTokenizer()
    for dataset, own in ((_dataset(shards, training=False), validation), (_dataset(shards), train)):
        batch = dataset.batch(0, ROWS)
        for row, segments in zip(batch["targets"], batch["segment_ids"]):
            for s in set(segments[segments > 0]):
                text = tok.decode(t for t in row[segments == s] if t != tok.eos_id)
                assert text in own


@pytest.mark.parametrize("split,processes", [("train", 2), ("train", 3), ("validation", 2)])
def test_processes_read_disjoint_shares_that_cover_the_split(shards, split, processes):
    paths = c4.list_shards(str(shards), split)
    shares = [
        collections.Counter(_read(c4.units_of(paths, p, processes))) for p in range(processes)
    ]
    assert all(shares)  # every process has records (1 validation shard: cut into stripes)
    assert sum(shares, collections.Counter()) == collections.Counter(_docs(paths))
    assert sum(sum(s.values()) for s in shares) == len(_docs(paths))


def test_two_processes_pack_every_validation_token_once(shards):
    """Each process's finite validation stream, packed: together exactly the split's tokens."""
    tok = tokenizers.ByteTokenizer()
    expected = sum(len(tok.encode(t)) + 1 for t in _docs(shards.glob("c4-validation.*")))
    total = 0
    for p in range(2):
        dataset = _dataset(shards, training=False, process=(p, 2))
        for i in range(100):
            tokens = int(dataset.batch(i, 16)["weights"].sum())
            total += tokens
            if not tokens:  # ran out: rows of padding, never a hang
                break
        assert i < 99
    assert total == expected


def test_order_is_a_function_of_the_seed(shards):
    a, b = _batches(_dataset(shards), 0, 3), _batches(_dataset(shards), 0, 3)
    _assert_same(a, b)
    c = _batches(_dataset(shards, seed=8), 0, 3)
    assert not np.array_equal(a[0]["targets"], c[0]["targets"])


def test_packed_rows(shards):
    """EOS ends each document; inputs are targets shifted within a document; padding has weight 0."""
    eos = tokenizers.ByteTokenizer.eos_id
    for batch in _batches(_dataset(shards), 0, 3) + [_dataset(shards, training=False).batch(0, 64)]:
        seg, pos = batch["segment_ids"], batch["positions"]
        np.testing.assert_array_equal(batch["weights"], (seg > 0).astype(np.float32))
        np.testing.assert_array_equal(batch["inputs"][pos == 0], eos)
        inner = pos[:, 1:] > 0
        np.testing.assert_array_equal(
            batch["inputs"][:, 1:][inner], batch["targets"][:, :-1][inner]
        )
        np.testing.assert_array_equal(seg[:, 1:][inner], seg[:, :-1][inner])
        np.testing.assert_array_equal(pos[:, 1:][inner], pos[:, :-1][inner] + 1)
        # A document boundary inside a row follows an EOS target.
        starts = (pos[:, 1:] == 0) & (seg[:, 1:] > 0)
        np.testing.assert_array_equal(batch["targets"][:, :-1][starts], eos)


def test_resume_from_saved_state_gives_the_same_batches(shards):
    dataset = _dataset(shards)
    _batches(dataset, 0, 5)
    state = dataset.get_state()
    expected = _batches(dataset, 5, 6)  # past the first epoch of 4 x 32 documents
    resumed = _dataset(shards)
    resumed.set_state(state)
    _assert_same(_batches(resumed, 5, 6), expected)


def test_saved_state_for_other_shards_is_a_usage_error(shards):
    dataset = _dataset(shards)
    dataset.batch(0, ROWS)
    with pytest.raises(UsageError, match="same shards and number of processes"):
        _dataset(shards, process=(0, 2)).set_state(dataset.get_state())


@pytest.mark.parametrize(
    "data_dir,message",
    [
        ("missing", "does not exist"),
        ("empty", r"no c4-train\.\*-of-\*\.json\.gz under"),
        (None, "needs the directory"),
    ],
)
def test_missing_directory_or_shards(tmp_path, data_dir, message):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=message):
        _dataset(tmp_path / data_dir if data_dir else "")


def _copy_with(shards, tmp_path, edit, shard="c4-train.00000-of-00004"):
    """The generated shards with one shard's bytes passed through edit()."""
    for path in shards.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    first = tmp_path / f"{shard}.json.gz"
    first.write_bytes(edit(first.read_bytes()))
    return tmp_path, str(first)


def _with_lines(bad_lines: dict):
    def edit(data):
        lines = gzip.decompress(data).split(b"\n")
        for number, line in bad_lines.items():
            lines[number - 1] = line
        return gzip.compress(b"\n".join(lines))

    return edit


@pytest.mark.parametrize(
    "line,message",
    [
        (b'{"text": "caf\xe9"}', r":3: invalid UTF-8 \(invalid continuation byte at byte 13\)"),
        (b'{"text": "cut off', r":3: invalid JSON \(Unterminated string"),
        (b'{"url": "https://example.com"}', r":3: no string field 'text'"),
    ],
)
def test_bad_record_names_file_and_line(shards, tmp_path, line, message):
    data_dir, first = _copy_with(shards, tmp_path, _with_lines({3: line}))
    units = c4.units_of(c4.list_shards(str(data_dir), "train"), 0, 1)
    with pytest.raises(c4.C4DataError, match=first.replace(".", r"\.") + message) as e:
        _read(units)
    assert "BAD_RECORD_POLICY=skip" in str(e.value)
    # The same error surfaces through the pipeline's threads.
    with pytest.raises(c4.C4DataError, match=message):
        _batches(_dataset(data_dir), 0, 40)


def test_corrupt_gzip_names_the_file(shards, tmp_path):
    # Truncated mid-stream: a partial download.
    data_dir, first = _copy_with(shards, tmp_path, lambda data: data[: len(data) // 2])
    with pytest.raises(
        c4.C4DataError,
        match=first.replace(".", r"\.") + r": corrupt gzip data after line \d+ \(EOFError",
    ):
        _read(c4.units_of(c4.list_shards(str(data_dir), "train"), 0, 1))


def test_skip_policy_skips_and_counts(shards, tmp_path):
    bad = {2: b"\xff\xfe", 5: b"not json", 9: b"[1, 2]"}
    data_dir, _ = _copy_with(shards, tmp_path, _with_lines(bad))
    texts = _read(c4.units_of(c4.list_shards(str(data_dir), "train"), 0, 1), skip_bad=True)
    assert texts.count(None) == 3 and len(texts) == 4 * 32
    # Through the pipeline (validation: read in order, to its end), counted in the saved position.
    data_dir, _ = _copy_with(shards, tmp_path, _with_lines(bad), "c4-validation.00000-of-00001")
    dataset = _dataset(data_dir, training=False, policy="skip")
    _batches(dataset, 0, 2, rows=16)
    resumed = _dataset(data_dir, training=False, policy="skip")
    resumed.set_state(dataset.get_state())
    for d in (dataset, resumed):
        for i in range(2, 100):
            if not d.batch(i, 16)["weights"].sum():
                break
        assert d.bad_records == 3


def test_sentencepiece_tokenizer(spm_model, shards):
    tok = tokenizers.build(spm_model)
    assert tok.vocab_size == 300 and tok.eos_id == 1
    text = "The operator not in is defined to have the inverse truth value of in."
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and 0 < len(ids) < len(text)
    assert tok.decode(ids) == text
    config = DatasetConfig(
        name="train",
        source="c4",
        is_training=True,
        seq_len=SEQ_LEN,
        seed=1,
        data_dir=str(shards),
        tokenizer_path=spm_model,
    )
    batch = c4.C4Dataset(config, tok).batch(0, 32)
    assert batch["targets"].max() < 300
    starts = (batch["positions"][:, 1:] == 0) & (batch["segment_ids"][:, 1:] > 0)
    assert starts.any() and (batch["targets"][:, :-1][starts] == tok.eos_id).all()


def test_missing_sentencepiece_model_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        tokenizers.build(str(tmp_path / "nope.model"))


def test_inspect_prints_examples_and_token_counts(shards, spm_model, capsys):
    from pax.data.cli import main

    assert (
        main(
            [
                "inspect",
                "--data_dir",
                str(shards),
                "--split",
                "validation",
                "--tokenizer",
                spm_model,
                "--examples",
                "2",
                "--seq_len",
                "64",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    tok = tokenizers.build(spm_model)
    total = sum(len(tok.encode(t)) + 1 for t in _docs(shards.glob("c4-validation.*")))
    assert out.count("--- document ") == 2
    assert f"total tokens: {total} = {-(-total // 64)} packed rows of 64" in out
    assert main(["inspect", "--data_dir", str(shards / "missing")]) == 2
