"""A checkpoint's bytes are checked against the sha256 recorded when it was written.

orbax and tensorstore check only their own structure: flipped bytes in an array's chunk read
back as other numbers. Each kind of file (the parameters' data, the optimizer's, orbax's
metadata) is damaged in a real checkpoint of the session's Tiny run; resuming sets it aside and
goes on from the one before, and decoding refuses it.
"""

import logging
import os
import re

import jax
import numpy as np
import pytest
import tensorstore as ts

from pax.checkpoint import manager
from pax.decode import decoder as decoder_lib
from pax.decode.options import Options
from pax.train import placement
from pax.train.instantiate import instantiate
from tests.helpers import Tiny, derive, read_metrics, train

NEWEST = "checkpoint_00000006"


@pytest.fixture
def job(tiny_job_copy):
    """A finished Tiny run (checkpoints 3 and 6), copied fresh for each test that changes it."""
    return tiny_job_copy


def _value(checkpoint_dir, array: str) -> tuple[str, int, int]:
    """(data file, offset, length) of ARRAY's one chunk in the checkpoint's OCDBT database."""
    database = "state/ocdbt.process_0"
    base = ts.KvStore.open({"driver": "file", "path": f"{checkpoint_dir}/{database}/"}).result()
    manifest = ts.ocdbt.dump(base).result()
    node = ts.ocdbt.dump(base, manifest["versions"][-1]["root"]["location"]).result()
    prefix = f"{array}/".encode()
    [value] = [
        e["indirect_value"]
        for e in node["entries"]
        if e["key"].startswith(prefix) and "indirect_value" in e
    ]
    name, offset, length = re.fullmatch(r"value::(\S+):(\d+):(\d+)", value).groups()
    return f"{database}/{name}", int(offset), int(length)


def _flip(path, offset: int, length: int = 4096) -> None:
    """Inverts LENGTH bytes of PATH from OFFSET: a file damaged in place, its size unchanged."""
    with open(path, "r+b") as f:
        f.seek(offset)
        damaged = bytes(b ^ 0xFF for b in f.read(length))
        f.seek(offset)
        f.write(damaged)


def _read(checkpoint_dir, array: str) -> np.ndarray:
    """One array of the checkpoint as tensorstore reads it, through a cache of its own."""
    spec = {
        "driver": "zarr",
        "kvstore": {"driver": "ocdbt", "base": f"file://{checkpoint_dir}/state/", "path": array},
    }
    return ts.open(spec, context=ts.Context()).result().read().result()


def _flip_unnoticed(checkpoint_dir, array: str) -> str:
    """Flips 4 KB of ARRAY's chunk where zstd and tensorstore notice nothing (its raw literals):
    the array reads back as other numbers, without an error. Returns the file's name."""
    name, offset, length = _value(checkpoint_dir, array)
    path = checkpoint_dir / name
    clean, expected = path.read_bytes(), _read(checkpoint_dir, array)
    for start in range(offset + 64, offset + length - 4096, 1024):
        _flip(path, start)
        try:
            if not np.array_equal(_read(checkpoint_dir, array), expected, equal_nan=True):
                return name
        except ValueError:  # zstd saw it: not the damage this is about
            pass
        path.write_bytes(clean)
    raise AssertionError(f"every 4 KB flipped in {array} is noticed by zstd")


def _flip_file(checkpoint_dir, name: str) -> str:
    _flip(checkpoint_dir / name, os.path.getsize(checkpoint_dir / name) // 2 - 64, 128)
    return name


def _truncate(checkpoint_dir, name: str) -> str:
    path = checkpoint_dir / name
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    return name


DAMAGE = {
    "parameters": lambda c: _flip_unnoticed(c, "params.layers.ffn.wi"),
    # Decoding never reads the optimizer's statistics; a resume read them as they were.
    "optimizer state": lambda c: _flip_unnoticed(c, "opt_state.inner_state.1.nu.embedding"),
    "orbax's tree metadata": lambda c: _flip_file(c, "state/_METADATA"),
    "the step's metadata": lambda c: _flip_file(c, "_CHECKPOINT_METADATA"),
    "array data, truncated": lambda c: _truncate(c, _value(c, "params.embedding")[0]),
}


def _restore(job):
    """(step, state) from restore_latest, as a resumed run calls it."""
    place = placement.for_run(instantiate(Tiny(), devices=jax.devices()[:1], with_data=False))
    checkpointer = place.checkpointer(str(job), saving=False)
    try:
        return checkpointer.restore_latest(place.abstract)
    finally:
        checkpointer.close()


def test_every_file_of_a_checkpoint_is_recorded(tiny_job):
    for step in (3, 6):
        checkpoint_dir = tiny_job / "checkpoints" / f"checkpoint_{step:08d}"
        listed = (checkpoint_dir / manager.DIGESTS).read_text().splitlines()
        names = sorted(
            os.path.relpath(os.path.join(root, n), checkpoint_dir)
            for root, _, files in os.walk(checkpoint_dir)
            for n in files
            if n != manager.DIGESTS
        )
        assert [line.split("  ", 1)[1] for line in listed] == names
        assert "state/_METADATA" in names and "_CHECKPOINT_METADATA" in names
        assert manager.check_digests(str(checkpoint_dir)) is True


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_file_sets_the_checkpoint_aside_and_the_one_before_restores(job, kind, caplog):
    damaged = DAMAGE[kind](job / "checkpoints" / NEWEST)
    with caplog.at_level(logging.WARNING):
        step, state = _restore(job)
    assert step == 3 and int(state["step"]) == 3
    assert sorted(os.listdir(job / "checkpoints_damaged")) == [NEWEST]
    assert sorted(os.listdir(job / "checkpoints")) == ["checkpoint_00000003"]
    # orbax itself says so when it lists the steps and meets a damaged _CHECKPOINT_METADATA.
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and
              f"{os.sep}orbax{os.sep}" not in r.pathname]  # fmt: skip
    assert line == (
        f"checkpoint {NEWEST} is damaged (CheckpointDamaged: {damaged} differs from the sha256 "
        f"recorded when it was written); moved to {job}/checkpoints_damaged/{NEWEST}"
    )


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(lambda text: text[: text.index("\n") + 1], id="at a line"),
        pytest.param(lambda text: text[: len(text) // 2], id="mid-line"),
        pytest.param(lambda text: "", id="empty"),
    ],
)
def test_a_record_cut_short_is_damage(job, cut):
    record = job / "checkpoints" / NEWEST / manager.DIGESTS
    record.write_text(cut(record.read_text()))
    with pytest.raises(manager.CheckpointDamaged, match=r" is (damaged|not in SHA256SUMS)"):
        manager.check_digests(str(job / "checkpoints" / NEWEST))


def test_a_missing_file_is_damage(job):
    os.remove(job / "checkpoints" / NEWEST / "state" / "_sharding")
    with pytest.raises(manager.CheckpointDamaged, match=r"^state/_sharding is missing$"):
        manager.check_digests(str(job / "checkpoints" / NEWEST))


def test_flipped_optimizer_state_resumes_from_the_checkpoint_before_it(job):
    # Without the digests this resume read the flipped statistics and its loss became NaN.
    DAMAGE["optimizer state"](job / "checkpoints" / NEWEST)
    train(job, derive(Tiny, NUM_TRAIN_STEPS=7))
    resumed = read_metrics(job)[6:]
    assert [m["step"] for m in resumed] == [4, 5, 6, 7]
    assert np.all(np.isfinite([m["loss"] for m in resumed]))
    # The checkpoint written again at step 6 has digests of its own, and they hold.
    assert manager.check_digests(str(job / "checkpoints" / NEWEST)) is True


def _decode(job):
    run = instantiate(Tiny(), devices=jax.devices()[:1], with_data=False)
    options = Options(prompts=("The list",), max_new_tokens=4)
    return decoder_lib.decode_once(decoder_lib.Decoder(run, str(job), options, True))


def test_decoding_refuses_a_damaged_checkpoint_naming_it_and_the_fix(job):
    damaged = DAMAGE["optimizer state"](job / "checkpoints" / NEWEST)
    with pytest.raises(manager.CheckpointDamaged) as error:
        _decode(job)
    checkpoint_dir = job / "checkpoints" / NEWEST
    assert str(error.value) == (
        f"{checkpoint_dir} is damaged: {damaged} differs from the sha256 recorded when it was "
        f"written; nothing was decoded. Move it to {job}/checkpoints_damaged/ to decode the "
        "checkpoint before it (training does so when it resumes), or put a good copy back"
    )
    assert error.value.exit_code == 1
    assert not (job / "decoder_out").exists() and checkpoint_dir.is_dir()


def test_a_checkpoint_without_digests_restores_with_one_line_saying_so(job, caplog):
    # As checkpoints were written before they recorded digests.
    for step in (3, 6):
        os.remove(job / "checkpoints" / f"checkpoint_{step:08d}" / manager.DIGESTS)
    with caplog.at_level(logging.WARNING):
        step, _ = _restore(job)
    assert step == 6 and not (job / "checkpoints_damaged").exists()
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert line == (
        f"{job}/checkpoints/{NEWEST} has no SHA256SUMS (written before checkpoints recorded "
        "their files' sha256): its bytes cannot be checked"
    )
