"""The benchmark at a tiny size, so it cannot rot: it must produce every figure (not speeds).

Also: the three loops do the same matmul work (counted in their programs, against the one MFU
formula), the baseline is independent of pax, and docs/benchmarks.md's table is the render of docs/bench.json.
"""

import ast
import dataclasses
import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.extend.core as jex
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import baseline, bench, gpu_bench, minimal_loop, profile, table, tpu_bench
from pax.data.corpus import embedded_text
from pax.data.sources import WindowDataset
from pax.data.tokenizers import ByteTokenizer
from pax.experiments.config import OptimizerConfig
from pax.models import kernels
from pax.optim import optimizers
from pax.releases import readme
from pax.train import mfu
from tests.helpers import readme_block

TRAINING_FIGURES = (
    "trainer_mfu",
    "minimal_mfu",
    "baseline_mfu",
    "trainer_tokens_per_s",
    "baseline_tokens_per_s",
    "checkpoint_mb_per_s",
    "plain_write_mb_per_s",
    "async_stall_over_sync_save",
    "input_over_trainer_consumption",
)


# Slow tier: the decode benches; the fast tier has every training figure in the --no-decode
# test below and the decode figures' arithmetic in tests/benchmarks/test_decode_bench.py.
@pytest.mark.slow
def test_bench_produces_every_figure(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--small", "--steps", "2", "--repeats", "2", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    for key in TRAINING_FIGURES:
        assert r[key] > 0, key
    for key in ("trainer_over_minimal", "minimal_over_baseline", "trainer_over_baseline"):
        assert r[key]["n"] == 2 and 0 < r[key]["min"] <= r[key]["median"] <= r[key]["max"], key
    # One interval of each loop per round: as many of each as rounds.
    for key in ("trainer_step_s", "minimal_step_s", "baseline_step_s", "peak_flops"):
        assert r[key]["n"] == 2, key
    assert r["config"]["layers"] == 1 and r["config"]["dtype"] == "float32"
    assert len(r["machine"]["load_avg_1m"]) == 2
    for run in r["decode"]["runs"]:
        assert run["cached_tokens_per_s"] > 0 and run["recompute_tokens_per_s"] > 0
        assert run["speedup"] > 1 and run["measured_over_predicted"] > 0
        assert run["roofline_speedup"] > 1 and run["measured_over_roofline"] > 0
        assert 0 < run["memory"]["decode"]["peak"] <= run["memory"]["parts_bytes"]
    text = capsys.readouterr().out
    for label in (
        "machine",
        "config",
        "peak",
        "trainer",
        "minimal",
        "baseline",
        "ratio",
        "checkpoint",
        "async save",
        "input",
        "decode",
    ):
        assert any(line.startswith(label) for line in text.splitlines()), label
    # The table renders a fresh result as well as the recorded ones.
    assert "| 1 × 64, seq 32, batch 8, f32" in table.render_table([r])


def test_no_decode_leaves_decoding_out(tmp_path, capsys, monkeypatch):
    # The round's matmul peak on 256x256 matrices: a figure all the same, without the seconds
    # of 2048x2048 ones (speeds are not what this test checks).
    peak = functools.partial(mfu.measure_matmul_peak, n=256)
    monkeypatch.setattr(mfu, "measure_matmul_peak", peak)
    out = tmp_path / "bench.json"
    assert (
        bench.main(["--small", "--steps", "2", "--repeats", "1", "--no-decode", "--json", str(out)])
        == 0
    )
    r = json.loads(out.read_text())
    assert "decode" not in r and r["trainer_over_baseline"]["n"] == 1
    for key in TRAINING_FIGURES:
        assert r[key] > 0, key
    assert not any(line.startswith("decode") for line in capsys.readouterr().out.splitlines())


def test_profile_charges_the_traced_ops_to_their_source(capsys, monkeypatch):
    # The two profiles --profile prints (the model's, then the baseline's), kept as it makes them.
    profiles, op_times = [], profile.op_times

    def kept(*args):
        profiles.append(op_times(*args))
        return profiles[-1]

    monkeypatch.setattr(profile, "op_times", kept)
    assert bench.main(["--small", "--profile", "--steps", "2"]) == 0
    assert len(profiles) == 2
    for (groups, ops, wall_ms), matmul, count in (
        (profiles[0], "TransformerLm/layers/ffn/ffn.project/bte,eh->bth/dot_general", 1),
        (profiles[1], "Lm/Block/Dense/dot_general", 4),  # QKV, output, FFN in and out
    ):
        traced = sum(ms for ms, _ in groups.values())
        assert sum(ops.values()) == pytest.approx(traced)  # the same ops, one by one
        # At this size a step is mostly dispatch, so the ops cover only part of it; on n
        # cores, where ops overlap, they add up to at most n steps.
        assert 0 < traced < len(os.sched_getaffinity(0)) * wall_ms
        assert groups[("forward", "matmul", matmul)][1] == count  # ops per step, one layer
        assert {phase for phase, _, _ in groups} == {"forward", "backward", "other"}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("profile")
    assert any(line.split()[:2] == ["backward", "matmul"] for line in lines)
    assert "model ops by source, the 15 costliest (ms per step, ops per step):" in lines
    assert "model single ops, the 15 costliest (ms per step, instruction, shape):" in lines


@pytest.mark.parametrize(
    "op_name, source",
    [
        (
            "jit(step)/transpose(jvp(TransformerLm))/closed_call/layers/ffn/ffn.project/"
            "bth,bte->he/dot_general",
            ("backward", "TransformerLm/layers/ffn/ffn.project/bth,bte->he/dot_general"),
        ),
        ("jit(step)/jvp(Lm)/Block_3/LayerNorm_0/mul", ("forward", "Lm/Block/LayerNorm/mul")),
        (  # jax 0.12 names a scan's body
            "jit(step)/jvp(TransformerLm)/eval_jaxpr/layers/ffn/ffn.project/bte,eh->bth/dot_general",
            ("forward", "TransformerLm/layers/ffn/ffn.project/bte,eh->bth/dot_general"),
        ),
        (
            "jit(step)/transpose(jvp(Lm))/Embed_0.attend/dot_general",
            ("backward", "Lm/Embed.attend/dot_general"),
        ),
        ("jit(step)/jvp()/jit(log_softmax)/exp", ("forward", "log_softmax/exp")),
        ("jit(step)/add", ("other", "add")),
        ("", ("other", "?")),
    ],
)
def test_profile_source_of_an_op_name(op_name, source):
    assert profile.source(op_name) == source


def test_configs_and_dtype_options():
    assert bench.experiment("bench", "float32") is bench.BenchLm
    large = bench.experiment("large", "bfloat16")().task().model
    assert (large.num_layers, large.model_dims, large.seq_len) == (8, 1024, 512)
    assert large.fprop_dtype == "bfloat16"
    with pytest.raises(SystemExit) as e:
        bench.main(["--dtype", "float16"])
    assert e.value.code == 2


def _dot_flops(jaxpr) -> int:
    """2 × multiply-adds of every dot_general in a jaxpr, scan bodies times their length; but
    not rotary's products of sin and cos with the identity, which only keep XLA from computing
    them in every head (pax/models/kernels.py, sin_cos_table)."""
    total = 0
    for eqn in jaxpr.eqns:
        scope = str(eqn.source_info.name_stack)
        if eqn.primitive.name == "dot_general" and kernels.ROTARY_TABLE_SCOPE not in scope:
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[i] for i in contract)
        times = eqn.params["length"] if eqn.primitive.name == "scan" else 1
        for sub in jex.jaxprs_in_params(eqn.params):
            total += times * _dot_flops(sub)
    return total


def _step_program(loop_cls, *args):
    """The jaxpr of a loop's step, the loop built under eval_shape: its initialization is
    traced, never compiled (counting needs the step's program only)."""
    programs = []

    def build():
        loop = loop_cls(*args)
        programs.append(jax.make_jaxpr(loop.step)(loop.params, loop.opt_state, loop.batches[0]))

    jax.eval_shape(build)
    return programs[0]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_all_three_loops_do_the_flops_the_formula_counts(dtype):
    """mfu.flops_per_step, the one MFU numerator, is exactly the matmul work of each program:
    the project's model (layers in nn.scan) and the independent baseline (a Python loop)."""
    exp = type("Two", (bench.SmallBenchLm,), {"NUM_LAYERS": 2, "FPROP_DTYPE": dtype})()
    task = exp.task()
    cfg, batch = task.model, task.train.percore_batch_size
    data = WindowDataset(ByteTokenizer().encode(embedded_text()), cfg.seq_len, seed=0)
    batches = [data.batch(i, batch) for i in range(2)]
    expected = mfu.flops_per_step(cfg, batch)
    for loop, args in (
        (minimal_loop.MinimalLoop, (cfg, task.optimizer, batches)),
        (baseline.Baseline, (bench.baseline_shape(cfg), batches)),
    ):
        assert _dot_flops(_step_program(loop, *args).jaxpr) == expected, loop.__name__


def test_causal_half_counts_the_attention_matmuls_over_half_the_length():
    cfg = bench.SmallBenchLm().task().model
    t, h, d = cfg.seq_len, cfg.num_heads, cfg.dims_per_head
    # Q·Kᵀ and probs·V: 4·T·H·D a token a layer forward, three times that for a train step.
    attention = 3 * cfg.num_layers * 4 * t * h * d * (2 * t)
    assert mfu.flops_per_step(cfg, 2) - mfu.flops_per_step(cfg, 2, causal_half=True) == (
        pytest.approx(attention / 2)
    )


def test_baseline_imports_nothing_from_pax():
    tree = ast.parse(Path(baseline.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {
        "dataclasses",
        "time",
        "flax.linen",
        "jax",
        "jax.numpy",
        "jax.experimental.pallas.ops.tpu",  # splash_attention: jax's own kernel
        "optax",
    }


@functools.cache  # the uncapped einsum run is the cap-0 case's own: trained once for both
def _baseline_losses(attention: str, cap: float) -> list[float]:
    """The losses of two steps of a small baseline with ATTENTION capped at CAP."""
    shape = dict(vocab=256, layers=1, dims=256, hidden=512, heads=2, seq=128, dtype="float32")
    s = baseline.Shape(**shape, attention=attention, attention_cap=cap)
    run = baseline.Baseline(s, tpu_bench.synthetic_batches(256, 2, 128))
    return [(run.interval(1), float(run.loss))[1] for _ in range(2)]


@pytest.mark.parametrize("cap", [0.0, 0.05])
def test_the_baselines_splash_kernel_trains_as_its_einsum_attention(cap):
    """jax's splash kernel (interpreted on CPU, capping with its own attn_logits_soft_cap) and
    the einsum form under a causal mask: the same losses over two steps of the same model,
    forward, backward and update; a cap small enough to bind changes them."""
    losses = {kernel: _baseline_losses(kernel, cap) for kernel in baseline.ATTENTION}
    losses["uncapped"] = _baseline_losses("xla", 0.0)
    assert losses["splash"] == pytest.approx(losses["xla"], rel=1e-5)
    assert losses["xla"][1] < losses["xla"][0]  # it trained
    if cap:
        assert losses["xla"][1] != pytest.approx(losses["uncapped"][1], rel=1e-4)


def test_the_baseline_caps_logits_as_the_experiment_does():
    """baseline_shape carries the experiment's ATTEN_LOGIT_CAP and SOFTMAX_CAP (paxml
    tasks/lm/model_params.py TransformerLmSpmdAdafactor: 50 and 30); the output logits then stay
    inside (-cap, cap)."""
    cfg = bench.SmallBenchLm().task().model
    s = bench.baseline_shape(dataclasses.replace(cfg, atten_logit_cap=50.0, softmax_cap=30.0))
    assert (s.attention_cap, s.output_cap) == (50.0, 30.0)
    assert bench.baseline_shape(dataclasses.replace(cfg, atten_logit_cap=-1.0)).attention_cap == 0
    small = baseline.Shape(vocab=64, layers=1, dims=32, hidden=64, heads=2, seq=16, output_cap=0.2)
    model = baseline.Lm(small)
    uncapped_model = baseline.Lm(dataclasses.replace(small, output_cap=0.0))
    tokens = jnp.arange(32).reshape(2, 16)

    @jax.jit  # one program, not one per op
    def both(tokens):
        params = model.init(jax.random.key(0), tokens)
        return uncapped_model.apply(params, tokens), model.apply(params, tokens)

    uncapped, logits = jax.device_get(both(tokens))
    # Output logits of order 1 at init (the tied table's rows have norm ~1): the cap binds.
    assert np.abs(uncapped).max() > 0.4
    assert np.abs(logits).max() <= 0.2
    assert np.allclose(logits, 0.2 * np.tanh(uncapped / 0.2), atol=1e-6)


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_the_baseline_runs_the_trainers_optimizer(optimizer):
    """The baseline's optax chain, given the trainer's OptimizerConfig, updates a tree of
    unstacked tensors (the baseline's layers are unrolled) as pax.optim builds it: clip, Adam,
    Pax's per-tensor update cap, decay; so trainer / baseline compares the same math."""
    config = OptimizerConfig(
        optimizer=optimizer,
        learning_rate=0.1,
        adam_beta2=0.95,
        adam_clip_threshold=0.5,
        clip_gradient_norm_to_value=2.0,
        weight_decay=0.01,
    )
    if optimizer == "adamw":  # optax's adamw in Pax leaves vectors undecayed; the baseline not
        config = dataclasses.replace(config, weight_decay=0.0)
    pax_tx, _ = optimizers.build(config)
    base_tx = baseline.optimizer(**bench.baseline_optimizer(config))
    # Host arrays from numpy: no eager op compiles a program of its own.
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(8, 16)).astype(np.float32), "scale": np.ones(16, np.float32)}
    # A program each, not an op each.
    states = [jax.jit(tx.init)(params) for tx in (pax_tx, base_tx)]
    updates = [jax.jit(tx.update) for tx in (pax_tx, base_tx)]
    for _ in range(3):
        grads = {k: 3 * rng.normal(size=p.shape).astype(np.float32) for k, p in params.items()}
        (pax_updates, states[0]), (base_updates, states[1]) = (
            update(grads, state, params) for update, state in zip(updates, states)
        )
        for name in params:
            assert np.allclose(pax_updates[name], base_updates[name], rtol=1e-6, atol=1e-9), name
        assert np.abs(base_updates["w"]).max() > 0


def test_baseline_refuses_optimizers_it_does_not_model():
    with pytest.raises(ValueError, match="no counterpart for optimizer 'adafactor'"):
        bench.baseline_optimizer(OptimizerConfig(optimizer="adafactor"))


def test_baseline_refuses_configs_it_does_not_model():
    gated = type("Gated", (bench.SmallBenchLm,), {"ACTIVATION": "swiglu"})().task().model
    with pytest.raises(ValueError, match="no counterpart"):
        bench.baseline_shape(gated)


def test_the_bench_table_is_rendered_from_docs_bench_json():
    block = readme_block(table.START, table.END, "docs/benchmarks.md")
    assert block == f"\n\n{table.recorded_table()}\n\n", (
        "docs/benchmarks.md's performance table differs from docs/bench.json; run "
        "./noxw -s bench -- --record (or rewrite the block from the file)"
    )


def _record(dtype: str, date: str) -> dict:
    """A result as measure() writes it (figures made up: only the bookkeeping is tested)."""

    def stats(x):
        return {"median": x, "min": x * 0.9, "max": x * 1.1, "n": 3}

    return {
        "machine": {
            "device": "cpu: cpu",
            "cpus": 2,
            "jax": "0.10.2",
            "load_avg_1m": [1.0, 2.0],
            "date": date,
        },
        "config": {
            "name": "BenchLm",
            "layers": 4,
            "model_dims": 512,
            "seq": 256,
            "batch": 8,
            "dtype": dtype,
            "flops_per_step": 169e9,
        },
        "peak_flops": stats(2e11),
        **{f"{loop}_step_s": stats(2.0) for loop in ("trainer", "minimal", "baseline")},
        **{f"{loop}_mfu": 0.4 for loop in ("trainer", "minimal", "baseline")},
        **{
            ratio: stats(1.0)
            for ratio in ("trainer_over_baseline", "minimal_over_baseline", "trainer_over_minimal")
        },
        "checkpoint": {"bytes": 153e6, "async_stall_s": stats(0.01)},
        "checkpoint_mb_per_s": 500.0,
        "plain_write_mb_per_s": 800.0,
        "async_stall_over_sync_save": 0.04,
        "input_tokens_per_s": stats(7e7),
        "input_over_trainer_consumption": 8e4,
    }


def test_record_replaces_the_same_config_and_dtype(tmp_path):
    path, md = tmp_path / "bench.json", tmp_path / "README.md"
    md.write_text(f"before\n{table.START}\nold\n{table.END}\nafter\n")
    table.record(_record("float32", "2026-01-01"), path, md)
    table.record(_record("float32", "2099-01-01"), path, md)
    table.record(_record("bfloat16", "2026-01-01"), path, md)
    stored = json.loads(path.read_text())
    assert [(s["config"]["dtype"], s["machine"]["date"]) for s in stored] == [
        ("float32", "2099-01-01"),
        ("bfloat16", "2026-01-01"),
    ]
    assert md.read_text() == (
        f"before\n{table.START}\n\n{table.render_table(stored)}\n\n{table.END}\nafter\n"
    )
    rows = table.render_table(stored).splitlines()
    assert rows[2].startswith(
        "| 4 × 512, seq 256, batch 8, f32; 169 GFLOP | 2 s (1.8–2.2), MFU 40.0%"
    )
    assert rows[3].startswith("| 4 × 512, seq 256, batch 8, bf16;")
    assert table.render_table([]).startswith("No run recorded yet")


# Slow tier: the 1B path at a tiny size, bf16 and fp8; the fast tier has the script's refusal
# below and fp8's numerics in tests/models/test_fp8.py.
@pytest.mark.slow
def test_gpu_bench_dry_run_runs_the_whole_script_on_cpu(tmp_path):
    """ci/gpu_bench.sh --dry-run: the shell script, the 1B path's code at a tiny size, on CPU."""
    out = tmp_path / "gpu.json"
    env = dict(os.environ, PAX_PYTHON=sys.executable, PAX_GPU_BENCH_TIMEOUT_S="1500")
    done = subprocess.run(
        [str(table.ROOT / "ci" / "gpu_bench.sh"), "--dry-run", "--", "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("DRY RUN on CPU") for line in lines)
    for label in ("trainer bf16", "trainer fp8", "baseline bf16"):
        assert any(line.startswith(label) and "MFU" in line for line in lines), label
    assert any(line.startswith("speed-up fp8 / bf16:") for line in lines)
    assert lines[-1] == "OK"
    r = json.loads(out.read_text())
    assert r["dry_run"] and r["fp8_speedup"] > 0 and r["trainer_over_baseline"] > 0
    for row in ("trainer_bf16", "trainer_fp8", "baseline_bf16"):
        assert r[row]["step_s"] > 0 and r[row]["mfu"] > 0, row


def test_gpu_bench_without_a_gpu_says_so_and_exits_2(capsys):
    assert gpu_bench.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no GPU here" in err[0] and "--dry-run" in err[0]


# Slow tier: two compiles of each loop; the fast tier checks the recorded run's table.
@pytest.mark.slow
def test_the_accelerator_bench_checks_itself_end_to_end_on_cpu(capsys, tmp_path):
    """tpu_bench --dry-run: the trainer's compiled step (XLA and the interpreted splash kernel)
    and the baseline at a tiny size, with the summary against the targets; without --dry-run
    on a CPU it is a usage error."""
    from benchmarks import tpu_bench

    assert tpu_bench.main(["--batch", "1"]) == 2
    assert "no accelerator here" in capsys.readouterr().err
    args = ["--dry-run", "--batch", "2", "--remat", "full", "--attention", "xla", "splash"]
    assert tpu_bench.main([*args, "--steps", "2", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    # The baseline ran the experiment's caps (paxml TransformerLmSpmdAdafactor: 50 and 30).
    caps = json.loads((tmp_path / "r.json").read_text())["model"]["baseline_logit_caps"]
    assert caps == {"attention": 50.0, "output": 30.0}
    assert out.count("trainer / baseline") == 2
    assert "baseline xla" in out and "baseline splash" in out  # each side at each kernel
    assert "best MFU" in out and "causal attention at half" in out and "loss nan" not in out


def test_the_accelerator_table_is_rendered_from_docs_bench_json_and_meets_its_targets():
    """The recorded TPU run: docs/benchmarks.md's block is its render, the baseline ran the
    experiment's logit caps, and the record meets tpu_bench's targets: at every setting and
    kernel the trainer is at least as fast as the baseline at the same kernel, and the best MFU
    is at least 65%."""
    text, start, end = table.accelerator_block()
    page = table.ROOT / "docs" / "benchmarks.md"
    assert readme.blocks(page.read_text(), start, end) == [f"\n\n{text}\n\n"]
    (tpu,) = [r for r in table.load() if r.get("kind") == table.ACCELERATOR]
    assert tpu["machine"]["device"].startswith("tpu") and not tpu["machine"]["dry_run"]
    assert tpu["command"].startswith("python -m benchmarks.tpu_bench")
    splash = [(row, row["trainer"]["splash"]) for row in tpu["rows"]]
    assert splash and all("oom" not in r for _, r in splash)
    for row, r in splash:
        # Every row says which kernel the baseline ran; this record's ran einsum attention.
        assert set(row["baseline"]) <= {"xla", "splash"}
        assert r["step_s"] <= row["baseline"]["xla"]["step_s"], (row["batch"], row["remat"])
        # MFU is model FLOPs over time over the table peak, by the project's count and with
        # causal attention at half: recomputed, not read back.
        peak = tpu["peak"]["flops"]
        assert r["mfu"] == pytest.approx(row["flops_per_step"] / r["step_s"] / peak)
        half = row["flops_per_step_causal_half"]
        assert r["mfu_causal_half"] == pytest.approx(half / r["step_s"] / peak)
        assert half < row["flops_per_step"]
    assert max(r["mfu"] for _, r in splash) >= tpu_bench.MFU_GOAL
    assert tpu["model"]["baseline_logit_caps"] == {"attention": 50.0, "output": 30.0}
    # Both sides ran both kernels at every setting, and the trainer is not the slower one.
    for row in tpu["rows"]:
        assert set(row["trainer"]) == set(row["baseline"]) == {"xla", "splash"}, row["batch"]
        for kernel, r in row["trainer"].items():
            ratio = r["step_s"] / row["baseline"][kernel]["step_s"]
            assert ratio <= tpu_bench.RATIO_GOAL, (row["batch"], row["remat"], kernel)


def _bench_result(batch, jax_version="0.10.2", command="python -m benchmarks.tpu_bench"):
    return {
        "kind": "accelerator",
        "machine": {
            "device": "tpu: TPU v5 lite",
            "jax": jax_version,
            "jaxlib": jax_version,
            "libtpu": "0.0.42.1",
            "date": f"2026-01-0{batch // 8}",
            "dry_run": False,
        },
        "model": {"layers": 6},
        "steps": 8,
        "peak": {"flops": 197e12},
        "measured_matmul_flops": 160e12 + batch * 1e12,
        "command": f"{command} --batch {batch}",
        "rows": [{"batch": batch, "remat": "full", "trainer": {}, "baseline": {}}],
    }


def test_runs_split_over_settings_join_into_one_record():
    """A host's time limit can split the settings over runs: one record of all their rows, in
    batch order, with both commands; runs of another jax, or of the same setting twice, are
    refused."""
    rec = tpu_bench.joined([_bench_result(16), _bench_result(8)])
    assert [row["batch"] for row in rec["rows"]] == [8, 16]
    assert rec["command"] == (
        "python -m benchmarks.tpu_bench --batch 16 && python -m benchmarks.tpu_bench --batch 8"
    )
    assert rec["measured_matmul_flops"] == 168e12 and rec["machine"]["date"] == "2026-01-02"
    with pytest.raises(ValueError, match="differ in jax"):
        tpu_bench.joined([_bench_result(8), _bench_result(16, jax_version="0.10.3")])
    with pytest.raises(
        ValueError, match=r"more than one result for batch, remat \[\(8, 'full'\)\]"
    ):
        tpu_bench.joined([_bench_result(8), _bench_result(8)])


def test_each_accelerator_row_names_the_kernel_each_side_ran():
    def timed(ms):
        return {"step_s": ms / 1e3, "mfu": 0.5, "mfu_causal_half": 0.48}

    rec = {
        "machine": {"device": "tpu: TPU v5 lite", "date": "d", "jax": "j", "libtpu": "l"},
        "model": {
            "experiment": "tasks.X",
            "layers": 6,
            "model_dims": 2560,
            "hidden_dims": 10240,
            "heads": 20,
            "seq": 1024,
            "vocab": 32000,
        },
        "steps": 8,
        "peak": {"flops": 197e12, "source": "table"},
        "measured_matmul_flops": 166e12,
        "command": "python -m benchmarks.tpu_bench",
        "rows": [
            {
                "batch": 16,
                "remat": "full",
                "trainer": {"xla": timed(600), "splash": timed(500)},
                "baseline": {"xla": timed(580), "splash": timed(520)},
            },
            {  # a baseline that ran XLA attention alone: the trainer's splash row says so
                "batch": 8,
                "remat": "full",
                "trainer": {"splash": timed(300)},
                "baseline": {"xla": timed(310)},
            },
        ],
    }
    lines = table.render_accelerator_table([rec]).splitlines()
    assert lines[2].startswith("| tpu: TPU v5 lite | 16 | full | xla | 600 ms, MFU 50.0% (48.0%) ")
    assert "| xla | 580 ms, MFU 50.0% (48.0%) | 1.034 |" in lines[2]
    assert "| splash | 500 ms, MFU 50.0% (48.0%) | splash | 520 ms," in lines[3]
    assert lines[3].split("|")[8].strip() == "0.962"
    assert "| 8 | full | splash | 300 ms, MFU 50.0% (48.0%) | xla | 310 ms," in lines[4]
    assert "causal attention counted at half as MaxText counts it" in lines[-1]
    assert "the baseline without the logit caps" in lines[-1]  # a record that predates them
    rec["model"]["baseline_logit_caps"] = {"attention": 50.0, "output": 30.0}
    footnote = table.render_accelerator_table([rec]).splitlines()[-1]
    assert "logit caps (50 on attention, 30 on the output) and optimizer on both sides" in footnote
