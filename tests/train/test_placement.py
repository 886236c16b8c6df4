"""Each process feeds the batch rows its own devices hold, adjacent or not: simulated for every
host of the reference experiments' TPU slices, and run for real on two CPU processes."""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from pax import paths
from pax.train import placement
from tests.helpers import xla_flags
from tests.test_aot import TPU_PYTHON, needs_libtpu

ROOT = str(paths.ROOT)


@needs_libtpu
def test_every_host_of_every_reference_slice_feeds_the_rows_its_devices_hold(tmp_path):
    out = tmp_path / "feeds.json"
    result = subprocess.run(
        [str(TPU_PYTHON), "-m", "tests.train.feed_layouts", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, "XLA_FLAGS": ""},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    slices = {(s["experiment"], s["slice"]): s for s in json.loads(out.read_text())}
    # Every mesh experiment of the reference table on its v4 slice and on v5e (the pmapped one
    # runs on one host).
    assert set(slices) == {
        (name, where)
        for name, v4, v5e in (
            ("C4Spmd1BAdam4Replicas", "v4-8", "v5litepod-4"),
            ("LmCloudSpmd2BLimitSteps", "v4-8", "v5litepod-4"),
            ("C4Spmd16BAdam32Replicas", "v4-64", "v5litepod-32"),
            ("C4SpmdPipelineGpt3SmallAdam64Replicas", "v4-128", "v5litepod-64"),
        )
        for where in (v4, v5e)
    }
    for s in slices.values():
        _check_feed(s)
    # The layouts that matter are there: on a v4-64 each of the 8 hosts holds two runs of rows
    # that are not adjacent; on a v4-128 the pipeline's `stage` axis spans hosts, so hosts
    # share rows.
    v4_64 = slices[("C4Spmd16BAdam32Replicas", "v4-64")]
    assert len(v4_64["processes"]) == 8
    assert all(_runs(rows) == 2 for rows in v4_64["processes"].values())
    v4_128 = slices[("C4SpmdPipelineGpt3SmallAdam64Replicas", "v4-128")]
    assert len(v4_128["processes"]) == 16  # of 4 chips, each host holding half the batch
    assert sum(map(len, v4_128["processes"].values())) == 8 * v4_128["global_batch"]
    assert {tuple(r) for r in v4_128["readers"].values()} == {(0, 2), (1, 2)}
    assert {tuple(r) for r in v4_64["readers"].values()} == {(i, 8) for i in range(8)}


def _runs(rows: list) -> int:
    """How many runs of adjacent rows."""
    return 1 + sum(b != a + 1 for a, b in zip(rows, rows[1:]))


def _check_feed(s: dict) -> None:
    where = f"{s['experiment']} on {s['slice']}"
    # Each device got exactly the rows its shard is, found by their content.
    for d in s["devices"]:
        assert d["fed"] == d["shard"], f"{where}: device {d['device']} fed the wrong rows"
    owners: dict = {}
    for d in s["devices"]:
        for row in d["shard"]:
            owners.setdefault(row, set()).add(d["process"])
    assert sorted(owners) == list(range(s["global_batch"])), f"{where}: rows nobody feeds"
    # Each process reads each of its rows once, and exactly the rows its devices hold.
    for process, rows in s["processes"].items():
        assert rows == sorted(set(rows)), f"{where}: process {process} reads a row twice"
        held = sorted(r for r, procs in owners.items() if int(process) in procs)
        assert rows == held, f"{where}: process {process} reads rows its devices do not hold"
    # A stream's readers: processes holding the same rows read one part of it, others their own.
    sets = sorted({tuple(rows) for rows in s["processes"].values()})
    for process, rows in s["processes"].items():
        assert s["readers"][process] == [sets.index(tuple(rows)), len(sets)], where


_TWO_PROCESSES = """
import json, sys
import jax
from pax.parallel import distributed
distributed.initialize(sys.argv[1], 2, int(sys.argv[2]))
import numpy as np
from jax.experimental import multihost_utils
from pax.data.sources import SyntheticDataset
from pax.train import placement
# Devices interleaved by process: under `data` alone process 0 holds shards 0, 2, 4, 6; with
# `mdl` 2 each batch shard lies on one device of each process.
interleaved = [d for pair in zip(*[jax.local_devices(p) for p in (0, 1)]) for d in pair]
data, n = SyntheticDataset(1000, 4, seed=3), 16
fed = {}
for shape in ((1, 8, 1), (1, 4, 2)):
    mesh = jax.sharding.Mesh(np.array(interleaved).reshape(shape), ("replica", "data", "mdl"))
    rows = placement.process_rows(mesh, n)
    batch = placement.assemble(mesh, rows, data.batch(0, n, rows), n)
    whole = multihost_utils.process_allgather(batch["inputs"], tiled=True)
    fed[str(shape)] = {"rows": rows.tolist(), "same": bool((whole == data.batch(0, n)["inputs"]).all())}
with open(sys.argv[3], "w") as f:
    json.dump(fed, f)
"""


def test_two_processes_feed_rows_that_are_not_adjacent_into_one_global_batch(tmp_path):
    """Real jax.distributed over gloo: the global batch each process's rows make is the batch."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{s.getsockname()[1]}"
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(4),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _TWO_PROCESSES, addr, str(i), str(tmp_path / f"{i}.json")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    fed = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    split, shared = "(1, 8, 1)", "(1, 4, 2)"
    assert fed[0][split]["rows"] == [0, 1, 4, 5, 8, 9, 12, 13]
    assert fed[1][split]["rows"] == [2, 3, 6, 7, 10, 11, 14, 15]
    assert fed[0][shared]["rows"] == fed[1][shared]["rows"] == list(range(16))
    assert all(f[k]["same"] for f in fed for k in (split, shared))


def test_one_process_feeds_the_whole_batch_on_any_device_order():
    devices = jax.devices()[::-1]
    mesh = jax.sharding.Mesh(np.array(devices).reshape(1, 4, 2), ("replica", "data", "mdl"))
    rows = placement.process_rows(mesh, 8)
    assert rows.tolist() == list(range(8)) and placement.reader(mesh, 8) == (0, 1)
    local = {"inputs": np.arange(8 * 3).reshape(8, 3)}
    batch = placement.assemble(mesh, rows, local, 8)["inputs"]
    np.testing.assert_array_equal(np.asarray(batch), local["inputs"])
    assert batch.sharding.spec == jax.sharding.PartitionSpec(("replica", "data"), None)


@pytest.mark.parametrize(
    "rows,index,expected",
    [
        ([0, 1, 4, 5], (slice(4, 6), slice(None)), [2, 3]),
        ([0, 1, 4, 5], (slice(0, 2), slice(None)), [0, 1]),
        ([2, 3, 6, 7], (slice(6, 8), slice(1, 2)), [2, 3]),
    ],
)
def test_a_devices_shard_is_its_rows_wherever_they_lie(rows, index, expected):
    local = np.arange(4 * 2).reshape(4, 2)  # local row i holds 2i, 2i + 1
    got = placement.shard_of(local, np.array(rows), index, 8)
    np.testing.assert_array_equal(got, local[np.array(expected)][:, index[1]])


# Slow tier: three short trainings on C4, two of them as a pair of processes.
@pytest.mark.slow
def test_processes_holding_the_same_rows_read_one_part_of_the_c4_stream(tmp_path):
    """`mdl` across both processes (mesh [1,1,8]): one reader of the stream, so both feed the
    same rows of it, and the losses are one process's."""
    from tests.train import test_multihost as pair

    c4 = pytest.importorskip("pax.data.c4")  # grain: release 1.5.0 on
    data = tmp_path / "c4"
    c4.write_sample_shards(str(data), train_shards=4, validation_shards=1, docs_per_shard=32)
    common = ["--exp=C4SpmdTinyAdam1Replica", f"--data_dir={data}"] + [
        f"--set={a}"
        for a in (
            "NUM_LAYERS=1",
            "MODEL_DIMS=64",
            "HIDDEN_DIMS=128",
            "NUM_HEADS=8",
            "SEQ_LEN=32",
            "PERCORE_BATCH_SIZE=1",
            "NUM_TRAIN_STEPS=3",
            "SUMMARY_EVERY_N_STEPS=1",
            "CHECKPOINT_EVERY_N_STEPS=3",
            "EVAL_EVERY_N_STEPS=3",
            "ICI_MESH_SHAPE=[1,1,8]",
        )
    ]
    one, two = tmp_path / "one", tmp_path / "two"
    pair._one_process(one, common=common)
    pair._two_processes(two, common=common)
    pair._assert_same_losses(one, two)
