"""The benchmark at a tiny size, so it cannot rot: it must produce every figure (not speeds)."""

import json

from benchmarks import bench


def test_bench_produces_every_figure(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--small", "--steps", "2", "--repeats", "2", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    for key in (
        "trainer_over_minimal",
        "trainer_mfu",
        "minimal_mfu",
        "checkpoint_mb_per_s",
        "plain_write_mb_per_s",
        "async_stall_over_sync_save",
        "input_over_trainer_consumption",
    ):
        assert r[key] > 0, key
    assert r["trainer_step_s"]["n"] == 2 and r["minimal_step_s"]["n"] == 2
    assert r["config"]["layers"] == 1
    text = capsys.readouterr().out
    for label in (
        "machine",
        "peak",
        "trainer",
        "minimal",
        "ratio",
        "checkpoint",
        "async save",
        "input",
    ):
        assert any(line.startswith(label) for line in text.splitlines()), label
