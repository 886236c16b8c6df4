"""The GPU record: every figure docs/benchmarks.md and docs/fp8-gpu.md hold for one H200, in one
run of under 9 minutes.

  ci/h200.sh [--wheels DIR] [--dry-run] [-- --out DIR] [--stages NAME ...] [--budget-s S]

Each stage runs in a process of its own, one at a time on the GPU, and the record
(OUT/gpu_record.json) is rewritten after each, so a run cut short keeps what it measured:

  ceilings  an 8192³ bf16 matmul and a 2 GiB copy (read + write), random data: the ceilings
            the step and decoding are held against besides the data sheet's
  step      the 1B step (C4Spmd1BAdam4Replicas on one GPU) in bf16 and FP8, the independent
            baseline in bf16 (benchmarks/gpu_bench.py), the FP8 step's cuBLASLt FP8 GEMMs
            (pax/train/fp8_check.py), the bf16 step's peak device memory; MFU against the data
            sheet and the measured matmul, causal attention counted in full and at half
  plan      `python -m pax.aot --gpu h200` for that bf16 step, compiled deviceless on this
            machine's CPU beside the GPU work: its plan against the step's peak
  decode    the cached decode step at batch 1 at the 0.55B bench shapes
            (benchmarks/decode/roofline.py), against the HBM roofline at the data sheet's
            bandwidth and at the measured copy bandwidth
  tiny      LmCloudSpmdTiny's band seeds, its default seed and LmCloudSpmdTinyFp8 (150 steps,
            `python -m pax.main`, several side by side): the GPU band
            (OUT/LmCloudSpmdTiny.gpu.json), the default seed judged by `python -m pax.curves
            compare` against it, and FP8's checks against BF16's
  tier      `python -m pytest -m accelerator --full -p no:xdist`

--dry-run runs all of it on CPU at a tiny size (the tier collected, not run): it checks the
script, and its figures say nothing about a GPU. Without --dry-run and without a GPU it stops
with exit 2. Exit 1 when a stage failed or a loss was not finite; a target missed is reported,
not a failure (the record's test holds the targets once a record is kept).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pax.errors import ExitingArgumentParser

ROOT = Path(__file__).resolve().parent.parent
PROG = "gpu_record"
STAGES = ("ceilings", "step", "plan", "decode", "tiny", "tier")
# Targets on one H200 (docs/benchmarks.md), printed beside the figures.
MFU_GOAL, FP8_SPEEDUP_GOAL, RATIO_GOAL = 0.55, 1.3, 1.00
DECODE_ROOFLINE_GOAL, PLAN_TOLERANCE = 0.6, 0.10
# Each GPU stage's own limit, seconds (a stage also stops at the run's budget).
STAGE_LIMIT_S = {"ceilings": 60, "step": 240, "decode": 90, "tiny": 180, "tier": 150}
TINY = "tasks.lm.params.lm_cloud.LmCloudSpmdTiny"
TINY_FP8 = "tasks.lm.params.lm_cloud.LmCloudSpmdTinyFp8"
BAND_SEEDS = tuple(range(1, 11))
DEFAULT_SEED = 1234  # SEED's default: the run compare judges, and the FP8 run's seed
# The dry run's tiny runs: 1 layer, 6 steps, an eval at 3 and 6.
DRY_TINY_SETS = (
    "NUM_LAYERS=1",
    "NUM_TRAIN_STEPS=6",
    "SUMMARY_EVERY_N_STEPS=1",
    "EVAL_EVERY_N_STEPS=3",
    "EVAL_NUM_BATCHES=1",
)
DRY_BAND_SEEDS = (1, 2, 3)


# ---------------------------------------------------------------- stages (each its own process)


def stage_ceilings(dry: bool, _record: dict) -> dict:
    """The bf16 matmul and copy rates the device reaches, on random data (zeros and ones run
    faster than real data on a GPU)."""
    import jax
    import jax.numpy as jnp

    from pax.train import mfu

    n = 128 if dry else 8192
    k1, k2 = jax.random.split(jax.random.key(0))
    a = jax.random.normal(k1, (n, n), jnp.bfloat16)
    b = jax.random.normal(k2, (n, n), jnp.bfloat16)
    matmul_s = _best(jax.jit(lambda x, y: x @ y), a, b)
    words = (4 if dry else 2048) * 2**20 // 4
    x = jax.random.normal(k1, (words,), jnp.float32)
    copy_s = _best(jax.jit(lambda v: v + 1), x)  # reads and writes every byte once
    device = jax.devices()[0]
    return {
        "device": f"{device.platform}: {device.device_kind}",
        "table_bf16_flops": mfu.table_peak(device.device_kind),
        "matmul_n": n,
        "matmul_flops": 2 * n**3 / matmul_s,
        "copy_bytes": 2 * x.nbytes,
        "copy_bytes_per_s": 2 * x.nbytes / copy_s,
    }


def _best(fn, *args, repeats: int = 10) -> float:
    """Best-of-`repeats` seconds of fn(*args), compiled and warmed up first."""
    fn(*args).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return best


def stage_step(dry: bool, record: dict) -> dict:
    from benchmarks import gpu_bench
    from pax.train import mfu

    name = gpu_bench.DRY_RUN_EXPERIMENT if dry else gpu_bench.GPU_EXPERIMENT
    m = gpu_bench.measure(name, 2 if dry else 10, 2 if dry else None)
    cfg = m.pop("model")
    losses = m.pop("losses")
    causal_half = mfu.flops_per_step(cfg, m["batch"], True)
    measured = record.get("ceilings", {}).get("matmul_flops")
    for row in ("trainer_bf16", "trainer_fp8", "baseline_bf16"):
        r = m[row]
        r["mfu_causal_half"] = causal_half / r["step_s"] / m["peak"]["flops"]
        if measured:
            r["mfu_of_measured_matmul"] = m["flops_per_step"] / r["step_s"] / measured
            r["mfu_of_measured_matmul_causal_half"] = causal_half / r["step_s"] / measured
    return {
        **m,
        "flops_per_step_causal_half": causal_half,
        "steps": 2 if dry else 10,
        "losses_finite": all(x == x and abs(x) != float("inf") for x in losses),
        "model": {
            "layers": cfg.num_layers,
            "model_dims": cfg.model_dims,
            "hidden_dims": cfg.hidden_dims,
            "heads": cfg.num_heads,
            "seq": cfg.seq_len,
            "remat": cfg.remat_policy,
        },
    }


def stage_decode(dry: bool, record: dict) -> dict:
    from benchmarks.decode import roofline

    r = roofline.measure(dry, [1], 16 if dry else 128, 16 if dry else 256, 3)
    copy = record.get("ceilings", {}).get("copy_bytes_per_s")
    for run in r["runs"]:
        if copy:
            run["roofline_fraction_of_measured_copy"] = run["step_bytes"] / copy / run["step_s"]
    r["measured_copy_bytes_per_s"] = copy
    return r


STAGE_FUNCTIONS = {"ceilings": stage_ceilings, "step": stage_step, "decode": stage_decode}


# ---------------------------------------------------------------- the stages run as commands


def plan_command(dry: bool, json_path: Path) -> list[str]:
    """pax.aot for the step stage's bf16 step: the 1B on one H200 as gpu_bench trains it
    (compiled_step.one_device's mesh and batch); the dry run's tiny one on XLA:CPU."""
    from benchmarks import gpu_bench

    name = gpu_bench.DRY_RUN_EXPERIMENT if dry else gpu_bench.GPU_EXPERIMENT
    sets = ["ICI_MESH_SHAPE=(1,1,1)", "DCN_MESH_SHAPE=None", "NUM_STAGES=1"]
    sets += ["FPROP_DTYPE=bfloat16", *(["PERCORE_BATCH_SIZE=2"] if dry else [])]
    cmd = [sys.executable, "-m", "pax.aot", name, "--gpu", "h200", "--json", str(json_path)]
    return cmd + [f"--set={s}" for s in sets] + (["--cpu"] if dry else [])


def tier_command(dry: bool, junit: Path) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-m", "accelerator", "--full", "-p", "no:xdist"]
    cmd += ["-q", "-p", "no:cacheprovider", f"--junitxml={junit}", str(ROOT / "tests")]
    return cmd + (["--collect-only"] if dry else [])


def collected(output: str) -> dict:
    """The count a `pytest --collect-only -q` run prints ("N tests collected")."""
    found = re.search(r"^(\d+)(?:/\d+)? tests? collected", output, re.M)
    tests = int(found.group(1)) if found else 0
    return {"tests": tests, "failures": 0, "errors": 0, "skipped": 0, "collected_only": True}


def tier_counts(junit: Path) -> dict:
    """pytest's totals from its JUnit XML."""
    import xml.etree.ElementTree as ET

    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}


def tiny_runs(dry: bool, work: Path) -> list[tuple[str, list[str]]]:
    """(job name, pax.main command) of the tiny stage's runs: the band's seeds, the default
    seed and the FP8 run at the default seed."""
    sets = [f"--set={s}" for s in (DRY_TINY_SETS if dry else ())]

    def main(exp: str, job: str, seed: int) -> tuple[str, list[str]]:
        flags = [f"--exp={exp}", f"--job_log_dir={work / job}", f"--set=SEED={seed}", *sets]
        return job, [sys.executable, "-m", "pax.main", *flags]

    seeds = DRY_BAND_SEEDS if dry else BAND_SEEDS
    runs = [main(TINY, f"seed{s}", s) for s in seeds]
    return (
        runs
        + [main(TINY, f"seed{DEFAULT_SEED}", DEFAULT_SEED)]
        + [main(TINY_FP8, f"fp8-seed{DEFAULT_SEED}", DEFAULT_SEED)]
    )


def _side_by_side(commands: list[tuple[str, list[str]]], env: dict, width: int, limit: float):
    """Run the commands `width` at a time; {job: (exit status, seconds, log tail)}."""
    pending, running, done = list(commands), {}, {}
    deadline = time.monotonic() + limit
    while pending or running:
        while pending and len(running) < width:
            job, cmd = pending.pop(0)
            log = tempfile.TemporaryFile("w+")
            proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            running[job] = (proc, log, time.monotonic())
        for job, (proc, log, start) in list(running.items()):
            if proc.poll() is None and time.monotonic() < deadline:
                continue
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            log.seek(0)
            done[job] = (proc.returncode, time.monotonic() - start, log.read()[-2000:])
            del running[job]
        time.sleep(0.5)
    return done


def machine_lock() -> str:
    """Every distribution this Python has, `name==version` a line, sorted."""
    import importlib.metadata

    pins = {
        re.sub(r"[-_.]+", "-", (d.metadata["Name"] or "").lower()): d.version
        for d in importlib.metadata.distributions()
    }
    return "".join(f"{n}=={v}\n" for n, v in sorted(pins.items()) if n)


def stage_tiny(dry: bool, record: dict, out: Path, limit: float, width: int) -> dict:
    """The tiny runs side by side, the band from their seeds, compare's verdict on the default
    seed, and FP8's checks against the band."""
    from pax.curves import record as curves_record
    from pax.curves.job_dir import read_run
    from pax.curves.reference import load_reference
    from pax.curves.stats import tolerance

    work = Path(tempfile.mkdtemp(prefix="gpu-record-tiny-"))  # job dirs stay out of $OUT
    # A band names the environment that made it: here the machine's own, no release's lock, so
    # its installed set is written as the lock the runs name (PAX_LOCKFILE) and kept with them.
    lock = out / "machine-lock.txt"
    lock.write_text(machine_lock())
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", PAX_LOCKFILE=str(lock))
    runs = tiny_runs(dry, work)
    started = time.monotonic()
    done = _side_by_side(runs, env, width, limit)
    result = {
        "runs": {job: {"exit": code, "wall_s": round(s, 1)} for job, (code, s, _) in done.items()},
        "wall_s": round(time.monotonic() - started, 1),
        "side_by_side": width,
        "commands": {job: shlex.join(cmd[1:]) for job, cmd in runs},
    }
    failed = {job: tail for job, (code, _, tail) in done.items() if code}
    if failed:
        result["failed"] = {job: tail[-600:] for job, tail in failed.items()}
        return result
    seeds = [j for j, _ in runs if j.startswith("seed") and j != f"seed{DEFAULT_SEED}"]
    band = out / "LmCloudSpmdTiny.gpu.json"
    recorded = lambda job: curves_record.Recorded(  # noqa: E731
        work / job, result["commands"][job], done[job][1]
    )
    ref = curves_record.record(
        [recorded(j) for j in seeds],
        "LmCloudSpmdTiny.gpu",
        band,
        recorded_by=f"python -m benchmarks.gpu_record --stages tiny ({len(seeds)} seeds)",
        root=ROOT,
        calibration={"held_out": [recorded(f"seed{DEFAULT_SEED}")]},
    )
    compare = subprocess.run(
        [sys.executable, "-m", "pax.curves", "compare", str(work / f"seed{DEFAULT_SEED}")]
        + ["--reference", str(band)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    result["band"] = {"file": band.name, "summary": ref.summary()}
    result["compare"] = {"exit": compare.returncode, "report": compare.stdout[-3000:]}
    # FP8 against BF16: each of the band's checks, in the band's seed stds.
    ref = load_reference(band)
    bf16 = read_run(work / f"seed{DEFAULT_SEED}").curves
    fp8 = read_run(work / f"fp8-seed{DEFAULT_SEED}").curves
    checks = []
    for stat in ref.stats:
        a, b = stat.check.value(bf16), stat.check.value(fp8)
        checks.append(
            {
                "check": stat.check.label,
                "bf16": a,
                "fp8": b,
                "difference": None if a is None or b is None else b - a,
                "band_std": stat.std,
                "fp8_from_band_mean_stds": None
                if b is None or not stat.std
                else (b - stat.mean) / stat.std,
            }
        )
    result["fp8_against_bf16"] = {
        "limit_stds": tolerance(ref.alpha, len(ref.stats), ref.n),
        "checks": checks,
    }
    return result


# ---------------------------------------------------------------- the run


def _stage_process(name: str, dry: bool, record_path: Path, limit: float) -> dict:
    """One GPU stage in a process of its own (a fresh allocator: the step's peak is its own),
    reading the record so far; its figures, or what went wrong."""
    with tempfile.NamedTemporaryFile(suffix=".json", dir=record_path.parent) as f:
        cmd = [sys.executable, "-m", "benchmarks.gpu_record", "--stage", name]
        cmd += ["--record-in", str(record_path), "--json", f.name] + (["--dry-run"] if dry else [])
        try:
            done = subprocess.run(cmd, cwd=ROOT, timeout=limit)
        except subprocess.TimeoutExpired:
            return {"error": f"ran past {limit:.0f} s"}
        if done.returncode:
            return {"error": f"exit {done.returncode} (its output is in the log above)"}
        return json.loads(Path(f.name).read_text())


def run(args) -> dict:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    record_path = out / "gpu_record.json"
    deadline = time.monotonic() + args.budget_s
    record = {
        "kind": "gpu_record",
        "dry_run": args.dry_run,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python -m benchmarks.gpu_record " + " ".join(args.shown),
        "environment": environment(),
    }

    def save():
        record_path.write_text(json.dumps(record, indent=2, default=str) + "\n")

    save()
    plan = None
    if "plan" in args.stages:  # CPU only: compiles beside the GPU stages
        plan_json = out / "plan.json.part"
        plan_log = tempfile.TemporaryFile("w+")
        plan_cmd = plan_command(args.dry_run, plan_json)
        plan_env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
        plan = subprocess.Popen(plan_cmd, cwd=ROOT, env=plan_env, stdout=plan_log, stderr=plan_log)
        record["plan"] = {"command": shlex.join(plan_cmd[1:])}
    for name in args.stages:
        left = deadline - time.monotonic()
        start = time.monotonic()
        print(f"{PROG}: stage {name} ({left:.0f} s left)", flush=True)
        if left < 10:
            record[name] = {"error": "not run: the budget was spent"}
        elif name in STAGE_FUNCTIONS:
            record[name] = _stage_process(
                name, args.dry_run, record_path, min(left, STAGE_LIMIT_S[name])
            )
        elif name == "tiny":
            limit = min(left, STAGE_LIMIT_S["tiny"])
            try:
                record[name] = stage_tiny(args.dry_run, record, out, limit, args.side_by_side)
            except Exception as err:  # noqa: BLE001 - a stage's failure is part of the record
                record[name] = {"error": f"{type(err).__name__}: {err}"}
        elif name == "tier":
            junit = out / "tier.xml.part"
            cmd = tier_command(args.dry_run, junit)
            try:
                done = subprocess.run(
                    cmd,
                    cwd=ROOT,
                    timeout=min(left, STAGE_LIMIT_S["tier"]),
                    stdout=subprocess.PIPE,
                    text=True,
                )
                print(done.stdout, end="", flush=True)
                # A dry run only collects, and pytest's JUnit file then lists no test.
                counts = collected(done.stdout) if args.dry_run else tier_counts(junit)
                record[name] = {"exit": done.returncode, **counts}
            except (subprocess.TimeoutExpired, OSError) as err:
                record[name] = {"error": str(err).splitlines()[0]}
            junit.unlink(missing_ok=True)
            record[name]["command"] = shlex.join(cmd[1:])
        elif name == "plan":
            try:
                code = plan.wait(timeout=max(1, deadline - time.monotonic()))
                plan_log.seek(0)
                rows = json.loads(plan_json.read_text()) if not code else []
                record[name].update(exit=code, rows=rows, log=plan_log.read()[-1500:])
            except subprocess.TimeoutExpired:
                plan.kill()
                record[name]["error"] = "ran past the budget"
            plan_json.unlink(missing_ok=True)
        record[name]["stage_s"] = round(time.monotonic() - start, 1)
        save()
    if plan is not None and plan.poll() is None:
        plan.kill()
    record["summary"] = summary(record)
    save()
    return record


def environment() -> dict:
    """The machine's own stack: Python, jax and its CUDA plugin, the GPU, the XLA flags."""
    import importlib.metadata
    import platform

    def version(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    names = (
        "jax",
        "jaxlib",
        "jax-cuda13-plugin",
        "jax-cuda13-pjrt",
        "flax",
        "optax",
        "orbax-checkpoint",
        "tensorstore",
        "numpy",
        "tensorboardx",
        "grain",
    )
    smi = (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        if _has("nvidia-smi")
        else None
    )
    return {
        "python": platform.python_version(),
        "packages": {n: version(n) for n in names},
        "gpu": smi.stdout.strip() if smi and smi.returncode == 0 else None,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def _has(program: str) -> bool:
    import shutil

    return shutil.which(program) is not None


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def summary(record: dict) -> list[str]:
    """The figures against the targets, one line each (what the reply's tail shows)."""
    lines = []
    if "error" in record.get("ceilings", {"error": None}):
        pass
    c = record.get("ceilings", {})
    if "matmul_flops" in c:
        lines.append(
            f"ceilings: bf16 matmul {c['matmul_flops'] / 1e12:.0f} TFLOP/s ({c['matmul_n']}^3), "
            f"copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write), {c['device']}"
        )
    s = record.get("step", {})
    if "trainer_bf16" in s:
        b, f, base = s["trainer_bf16"], s["trainer_fp8"], s["baseline_bf16"]
        lines.append(
            f"step bf16 {b['step_s'] * 1e3:.1f} ms, fp8 {f['step_s'] * 1e3:.1f} ms, baseline "
            f"{base['step_s'] * 1e3:.1f} ms (batch {s['batch']}, {s['steps']} timed steps)"
        )
        lines.append(
            f"MFU bf16 {_pct(b['mfu'])} of {s['peak']['flops'] / 1e12:.0f} TFLOP/s "
            f"(causal half {_pct(b['mfu_causal_half'])}), of the measured matmul "
            f"{_pct(b.get('mfu_of_measured_matmul'))} (causal half "
            f"{_pct(b.get('mfu_of_measured_matmul_causal_half'))}); target >= {_pct(MFU_GOAL)}"
        )
        lines.append(
            f"fp8 / bf16 speed-up {s['fp8_speedup']:.2f}x (target >= {FP8_SPEEDUP_GOAL}x); "
            f"trainer / baseline {s['trainer_over_baseline']:.3f} (target <= {RATIO_GOAL:.2f}); "
            f"cuBLASLt FP8 GEMMs {s['f8_gemms']} for {s['f8_dots_lowered']} FP8 dots"
        )
    p, peak = record.get("plan", {}), s.get("peak_bytes_in_use_bf16")
    if p.get("rows"):
        planned = p["rows"][0]["per_device_bytes"]
        off = None if not peak else planned / peak - 1
        lines.append(
            f"plan {planned / 2**30:.2f} GiB ({p['rows'][0]['compiler']}) against the measured "
            f"peak {'n/a' if not peak else f'{peak / 2**30:.2f} GiB'}: "
            f"{'n/a' if off is None else f'{100 * off:+.1f}%'} (target within "
            f"{_pct(PLAN_TOLERANCE)})"
        )
    d = record.get("decode", {})
    for r in d.get("runs", []):
        lines.append(
            f"decode batch {r['batch']}: {r['tokens_per_s']:.0f} tokens/s, roofline fraction "
            f"{r['roofline_fraction']:.2f} of {d['bandwidth']['bytes_per_s'] / 1e12:.2f} TB/s, "
            f"{r.get('roofline_fraction_of_measured_copy', float('nan')):.2f} of the measured "
            f"copy (target >= {DECODE_ROOFLINE_GOAL})"
        )
    t = record.get("tiny", {})
    if "compare" in t:
        worst = max(
            (
                abs(c["fp8_from_band_mean_stds"])
                for c in t["fp8_against_bf16"]["checks"]
                if c["fp8_from_band_mean_stds"] is not None
            ),
            default=None,
        )
        lines.append(
            f"tiny: band {t['band']['summary']}; compare exit {t['compare']['exit']} (0 inside); "
            f"fp8's farthest check {'n/a' if worst is None else f'{worst:.2f}'} stds from the "
            f"band's mean (limit {t['fp8_against_bf16']['limit_stds']:.2f})"
        )
    tier = record.get("tier", {})
    if "tests" in tier:
        lines.append(
            f"accelerator tier: {tier['tests']} tests, {tier['failures']} failed, "
            f"{tier['errors']} errors, {tier['skipped']} skipped (exit {tier['exit']})"
        )
    for name in STAGES:
        problem = record.get(name, {}).get("error") or record.get(name, {}).get("failed")
        if problem:
            lines.append(f"stage {name} FAILED: {str(problem)[:300]}")
    return lines


def target_problems(record: dict) -> list[str]:
    """The targets a record misses (docs/benchmarks.md), one line each; figures a stage did not
    reach count as missed."""
    s, problems = record.get("step", {}), []
    b = s.get("trainer_bf16", {})
    if not b.get("mfu", 0) >= MFU_GOAL:
        problems.append(f"bf16 MFU {_pct(b.get('mfu'))} < {_pct(MFU_GOAL)}")
    if not s.get("fp8_speedup", 0) >= FP8_SPEEDUP_GOAL:
        problems.append(f"FP8 speed-up {s.get('fp8_speedup')} < {FP8_SPEEDUP_GOAL}")
    if not s.get("trainer_over_baseline", float("inf")) <= RATIO_GOAL:
        problems.append(f"trainer / baseline {s.get('trainer_over_baseline')} > {RATIO_GOAL}")
    runs = record.get("decode", {}).get("runs", [])
    if not runs or runs[0]["roofline_fraction"] < DECODE_ROOFLINE_GOAL:
        problems.append(f"decode below {DECODE_ROOFLINE_GOAL} of the roofline")
    rows, peak = record.get("plan", {}).get("rows"), s.get("peak_bytes_in_use_bf16")
    if not rows or not peak or abs(rows[0]["per_device_bytes"] / peak - 1) > PLAN_TOLERANCE:
        problems.append(f"the plan is not within {_pct(PLAN_TOLERANCE)} of the measured peak")
    tier = record.get("tier", {})
    if tier.get("failures", 1) or tier.get("errors", 1) or not tier.get("tests"):
        problems.append("the accelerator tier did not pass")
    if record.get("tiny", {}).get("compare", {}).get("exit") != 0:
        problems.append("the tiny run is not inside the GPU band")
    return problems


def failed(record: dict) -> bool:
    stages = [record.get(n, {}) for n in STAGES]
    return (
        any("error" in s or "failed" in s for s in stages)
        or record.get("step", {}).get("losses_finite") is False
        or record.get("tier", {}).get("exit", 0) != 0
    )


def main(argv=None) -> int:
    parser = ExitingArgumentParser(
        prog=f"python -m benchmarks.{PROG}", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny size: checks the script")
    parser.add_argument(
        "--out",
        default=os.environ.get("OUT") or "runs/gpu_record",
        help="where the record goes (default $OUT, else runs/gpu_record)",
    )
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument(
        "--budget-s", type=float, default=510, help="stop starting stages after this"
    )
    parser.add_argument("--side-by-side", type=int, default=6, help="tiny runs at a time")
    parser.add_argument("--stage", choices=sorted(STAGE_FUNCTIONS), help=argparse_hidden())
    parser.add_argument("--record-in", help=argparse_hidden())
    parser.add_argument("--json", help=argparse_hidden())
    args = parser.parse_args(argv)
    if args.stage:  # one GPU stage, in the process run() started for it
        record = json.loads(Path(args.record_in).read_text())
        result = STAGE_FUNCTIONS[args.stage](args.dry_run, record)
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
        return 0
    gpu = (
        _has("nvidia-smi")
        and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    )
    if not gpu and not args.dry_run:
        print(
            f"{PROG}: error: no GPU here (nvidia-smi lists none); run it on an H200, or pass "
            "--dry-run to check the script on CPU",
            file=sys.stderr,
        )
        return 2
    if args.dry_run:
        print("DRY RUN on CPU at a tiny size: these figures say nothing about a GPU.", flush=True)
    args.shown = list(argv if argv is not None else sys.argv[1:])
    record = run(args)
    print("\n".join(record["summary"]))
    if not args.dry_run:
        for problem in target_problems(record):
            print(f"target missed: {problem}")
    bad = failed(record)
    print("FAILED" if bad else "OK")
    return 1 if bad else 0


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
