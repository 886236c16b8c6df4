"""The decode step against the memory roofline (benchmarks/decode/roofline.py): what it reads,
which bandwidth it is held against, and its record in docs/bench.json."""

import json
import types

import pytest

from benchmarks import table
from benchmarks.decode import roofline, sizes
from benchmarks.decode.__main__ import main
from pax.train import compiled_step


def test_the_bandwidth_is_the_data_sheets_on_a_chip_and_says_so_elsewhere():
    v5e = types.SimpleNamespace(platform="tpu", device_kind="TPU v5 lite")
    assert roofline.bandwidth(v5e) == {
        "bytes_per_s": 819e9,
        "source": "data sheet: HBM of a TPU v5 lite",
    }
    unknown = types.SimpleNamespace(platform="tpu", device_kind="TPU v9 future")
    assert roofline.bandwidth(unknown)["source"].startswith("measured: ")


# Slow tier: four compiles of the generator (two batch sizes, two lengths), most of a minute on
# two cores; the fast tier checks the bandwidth's source and the record.
@pytest.mark.slow
def test_a_cpu_run_reports_tokens_per_second_and_its_roofline_fraction(tmp_path, capsys):
    out = tmp_path / "decode.json"
    args = ["--roofline", "--small", "--batch", "1", "2", "--prompt", "16", "--new", "8"]
    assert main([*args, "--repeats", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    r = json.loads(out.read_text())
    assert r["kind"] == "decode" and r["device"].startswith("cpu")
    # A CPU has no data sheet here: the figure is the bandwidth measured in the run, named so.
    bw = r["bandwidth"]
    assert bw["source"].startswith("measured: ") and bw["bytes_per_s"] > 1e8
    assert "measured: best of 5 sums" in printed
    cfg = compiled_step.one_device(roofline.EXPERIMENT, 1, **roofline.DRY_RUN_SHAPE)
    cfg = cfg.task().model
    assert [x["batch"] for x in r["runs"]] == [1, 2]
    for x in r["runs"]:
        # A step reads every parameter and the whole cache buffer: prompt bucket + new slots.
        span = x["prompt_bucket"] + x["new_tokens"]
        assert x["step_bytes"] == (
            sizes.parameter_bytes(cfg, sizes.read_dtype(cfg))
            + sizes.cache_bytes(cfg, x["batch"], span)
        )
        step = (x["generate_s"]["min"] - x["prefill_and_one_s"]["min"]) / 7
        assert x["step_s"] == pytest.approx(step)
        assert x["tokens_per_s"] == pytest.approx(x["batch"] / step)
        assert x["roofline_fraction"] == pytest.approx(x["step_bytes"] / bw["bytes_per_s"] / step)
        assert f"fraction {x['roofline_fraction']:.2f}" in printed


def test_a_step_that_cannot_be_told_from_prefill_is_refused_not_reported(monkeypatch):
    # A busy host can make 16 tokens time no slower than 1: that is no figure, not a negative rate.
    monkeypatch.setattr(roofline, "_seconds", lambda *a: [0.30, 0.25])
    with pytest.raises(RuntimeError, match="too busy to time a step"):
        roofline.measure(True, [1], 16, 16, 2)


def _decode_record(device, fraction):
    return {"kind": "decode", "device": device, "runs": [{"roofline_fraction": fraction}]}


def test_a_decode_record_is_stored_beside_the_others_one_per_device(tmp_path):
    path = tmp_path / "bench.json"
    cpu, accelerator = (
        {"config": {"name": "BenchLm", "dtype": "float32"}},
        {
            "kind": "accelerator",
            "machine": {"device": "tpu: TPU v5 lite"},
        },
    )
    path.write_text(json.dumps([cpu, accelerator]))
    table.record_decode(_decode_record("tpu: TPU v5 lite", 0.4), path, pages=[])
    table.record_decode(_decode_record("tpu: TPU v5 lite", 0.6), path, [])  # replaces it
    table.record_decode(_decode_record("gpu: H100", 0.7), path, pages=[])
    records = table.load(path)
    assert records[:2] == [cpu, accelerator]
    assert [(r["device"], r["runs"][0]["roofline_fraction"]) for r in records[2:]] == [
        ("gpu: H100", 0.7),
        ("tpu: TPU v5 lite", 0.6),
    ]


def test_a_decode_record_rewrites_its_table(tmp_path):
    path, page = tmp_path / "bench.json", tmp_path / "benchmarks.md"
    path.write_text("[]")
    page.write_text(f"before\n{table.DECODE_START}\n{table.DECODE_END}\nafter\n")
    run = {
        "batch": 1,
        "prompt_tokens": 128,
        "new_tokens": 256,
        "step_s": 0.0016,
        "tokens_per_s": 625.0,
        "step_bytes": 1.13e9,
        "roofline_step_s": 0.00138,
        "roofline_fraction": 0.8625,
    }
    record = {
        **_decode_record("tpu: TPU v5 lite", 0.8625),
        "runs": [run],
        "model": {
            "experiment": "tasks.X",
            "layers": 6,
            "model_dims": 2560,
            "heads": 20,
            "vocab": 32000,
            "dtype": "bfloat16",
        },
        "bandwidth": {"bytes_per_s": 819e9, "source": "data sheet"},
        "repeats": 3,
        "date": "2026-12-06",
        "jax": "0.10.2",
    }
    table.record_decode(record, path, pages=[page])
    text = page.read_text()
    assert (
        "| tpu: TPU v5 lite | 1 | 128, 256 | 1.600 ms | 625 | 1130.0 MB | 1.380 ms | 0.86 |" in text
    )
    assert "`python -m benchmarks.decode --roofline --batch 1 --prompt 128 --new 256" in text
    assert text.startswith("before\n") and text.endswith("after\n")


def test_recording_a_cpu_run_is_refused(tmp_path, capsys):
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps(_decode_record("cpu: cpu", 0.5)))
    with pytest.raises(SystemExit) as exit_:
        main(["--record-json", str(cpu)])
    assert exit_.value.code == 2
    assert "not a --roofline record from an accelerator" in capsys.readouterr().err
