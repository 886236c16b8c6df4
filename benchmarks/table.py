"""The performance table, generated from `bench --record`'s docs/bench.json (no jax here).

docs/benchmarks.md holds it between the markers below; tests/benchmarks/test_bench.py
and tests/docs check that the committed blocks equal the render of the committed docs/bench.json.
"""

import json
from pathlib import Path

from pax.paths import ROOT
from pax.releases import readme

BENCH_JSON = ROOT / "docs" / "bench.json"
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"
# benchmarks/tpu_bench.py's records (kind "accelerator") have a table of their own.
ACCELERATOR = "accelerator"
ACCEL_START = "<!-- accelerator-bench-table:start -->"
ACCEL_END = "<!-- accelerator-bench-table:end -->"
# benchmarks/decode's --roofline records (kind "decode"), kept beside them, one per device.
DECODE = "decode"
DECODE_START = "<!-- decode-roofline-table:start -->"
DECODE_END = "<!-- decode-roofline-table:end -->"
# Rows in this order; a record's key is (config name, dtype).
CONFIG_ORDER = ("BenchLm", "LargeBenchLm", "SmallBenchLm")
DTYPES = {"float32": "f32", "bfloat16": "bf16"}


def key(r: dict) -> tuple:
    c = r["config"]
    name = c["name"].removesuffix("Bf16")
    order = CONFIG_ORDER.index(name) if name in CONFIG_ORDER else len(CONFIG_ORDER)
    return (order, name, list(DTYPES).index(c["dtype"]) if c["dtype"] in DTYPES else 9)


def _range(s: dict, scale=1.0, unit="", fmt="{:.3g}") -> str:
    return (
        f"{fmt.format(s['median'] * scale)}{unit} "
        f"({fmt.format(s['min'] * scale)}–{fmt.format(s['max'] * scale)})"
    )


def _step(r: dict, loop: str) -> str:
    return f"{_range(r[f'{loop}_step_s'], unit=' s')}, MFU {100 * r[f'{loop}_mfu']:.1f}%"


def _ratio(s: dict) -> str:
    return _range(s, fmt="{:.3f}")


def render_table(records: list[dict]) -> str:
    """Markdown for docs/bench.json's records; ends without a newline."""
    if not records:
        return "No run recorded yet: `./noxw -s bench -- --record` measures one and fills this in."
    records = sorted(records, key=key)
    lines = [
        "| config | trainer step | project model, minimal loop | independent baseline | "
        "trainer / baseline | minimal / baseline | trainer / minimal | peak (matmul) | "
        "measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        c, m = r["config"], r["machine"]
        lines.append(
            f"| {c['layers']} × {c['model_dims']}, seq {c['seq']}, batch {c['batch']}, "
            f"{DTYPES.get(c['dtype'], c['dtype'])}; {c['flops_per_step'] / 1e9:.0f} GFLOP | "
            f"{_step(r, 'trainer')} | {_step(r, 'minimal')} | {_step(r, 'baseline')} | "
            f"{_ratio(r['trainer_over_baseline'])} | {_ratio(r['minimal_over_baseline'])} | "
            f"{_ratio(r['trainer_over_minimal'])} | "
            f"{_range(r['peak_flops'], 1e-9, ' GFLOP/s')} | "
            f"{m['date']}, {m['device']}, {m['cpus']} CPUs, jax {m['jax']}, "
            f"load {m['load_avg_1m'][0]}→{m['load_avg_1m'][1]} |"
        )
    io = next((r for r in records if r["config"]["name"] == "BenchLm"), records[0])
    ck = io["checkpoint"]
    lines += [
        "",
        f"Framework figures of the {io['config']['layers']} × {io['config']['model_dims']} "
        f"{DTYPES.get(io['config']['dtype'])} run:",
        "",
        "| figure | measured | target |",
        "|---|---|---|",
        f"| orbax synchronous save of {ck['bytes'] / 1e6:.0f} MB | "
        f"{io['checkpoint_mb_per_s']:.0f} MB/s (plain write + fsync: "
        f"{io['plain_write_mb_per_s']:.0f} MB/s) | |",
        f"| loop stall per asynchronous save | {ck['async_stall_s']['median'] * 1e3:.1f} ms = "
        f"{100 * io['async_stall_over_sync_save']:.1f}% of a synchronous save | < 10% |",
        f"| input pipeline | {io['input_tokens_per_s']['median']:.2g} tokens/s = "
        f"{io['input_over_trainer_consumption']:,.0f}× the trainer's consumption | ≥ 10× |",
    ]
    return "\n".join(lines)


def load(path: Path = BENCH_JSON) -> list[dict]:
    return json.loads(path.read_text()) if path.is_file() else []


def _cpu(r: dict) -> bool:
    """A `./noxw -s bench` record (they carry no kind)."""
    return r.get("kind") not in (ACCELERATOR, DECODE)


def recorded_table(path: Path = BENCH_JSON) -> str:
    return render_table([r for r in load(path) if _cpu(r)])


PAGES = (ROOT / "docs" / "benchmarks.md",)  # the files holding the table


def block(path: Path = BENCH_JSON) -> tuple[str, str, str]:
    """(text, start, end) for pax.docs.blocks.refresh: `./noxw -s readme` keeps it current too."""
    return recorded_table(path), START, END


def record(result: dict, path: Path = BENCH_JSON, readme_path: Path | None = None) -> None:
    """Store `result` in path (replacing the record of the same config and dtype) and rewrite
    the table's blocks (in readme_path, or in every page of PAGES) from the file."""
    kept = [r for r in load(path) if not _cpu(r) or key(r) != key(result)]
    _store([*kept, result], path)
    for page in [readme_path] if readme_path else [p for p in PAGES if p.is_file()]:
        text = page.read_text()
        page.write_text(readme.rewrite_text(text, recorded_table(path), page.name, START, END))


def _store(records: list[dict], path: Path) -> None:
    cpu = sorted((r for r in records if _cpu(r)), key=key)
    accelerator = sorted(
        (r for r in records if r.get("kind") == ACCELERATOR), key=lambda r: r["machine"]["device"]
    )
    decode = sorted((r for r in records if r.get("kind") == DECODE), key=lambda r: r["device"])
    path.write_text(json.dumps(cpu + accelerator + decode, indent=2) + "\n")


def record_decode(result: dict, path: Path = BENCH_JSON, pages=None) -> None:
    """Store a decode --roofline record, replacing the record of the same device, and rewrite
    the decode table's blocks in `pages` (default: those of PAGES that hold its markers)."""
    device = result["device"]
    kept = [r for r in load(path) if r.get("kind") != DECODE or r["device"] != device]
    _store([*kept, result], path)
    _rewrite(decode_block, DECODE_START, path, pages)


def render_decode_table(records: list[dict]) -> str:
    """Markdown for the decode --roofline records: one row per (device, batch)."""
    if not records:
        return "No accelerator run recorded yet: `python -m benchmarks.decode --roofline` on one."
    lines = [
        "| device | batch | prompt, new tokens | step | tokens/s | a step reads | at the "
        "bandwidth | fraction of the roofline | measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in records:
        for x in rec["runs"]:
            lines.append(
                f"| {rec['device']} | {x['batch']} | {x['prompt_tokens']}, {x['new_tokens']} | "
                f"{x['step_s'] * 1e3:.3f} ms | {x['tokens_per_s']:.0f} | "
                f"{x['step_bytes'] / 1e6:.1f} MB | {x['roofline_step_s'] * 1e3:.3f} ms | "
                f"{x['roofline_fraction']:.2f} | {rec['date']}, jax {rec['jax']} |"
            )
        runs, m = rec["runs"], rec["model"]
        lines.append("")
        lines.append(
            f"Model: {m['layers']} × {m['model_dims']}, {m['heads']} heads, vocab {m['vocab']} "
            f"({m['experiment'].rsplit('.', 1)[-1]} with NUM_LAYERS={m['layers']}), {m['dtype']}; "
            f"bandwidth {rec['bandwidth']['bytes_per_s'] / 1e9:.0f} GB/s "
            f"({rec['bandwidth']['source']}). Reproduce: `python -m benchmarks.decode --roofline "
            f"--batch {' '.join(str(x['batch']) for x in runs)} --prompt "
            f"{runs[0]['prompt_tokens']} --new {runs[0]['new_tokens']} --repeats "
            f"{rec['repeats']}`."
        )
    return "\n".join(lines).rstrip()


def decode_block(path: Path = BENCH_JSON) -> tuple[str, str, str]:
    records = [r for r in load(path) if r.get("kind") == DECODE]
    return render_decode_table(records), DECODE_START, DECODE_END


def blocks(path: Path = BENCH_JSON) -> list[tuple[str, str, str]]:
    """Every table this module renders, for pax.docs.blocks.refresh (`./noxw -s readme`)."""
    return [block(path), accelerator_block(path), decode_block(path)]


def _rewrite(make_block, start: str, path: Path, pages=None) -> None:
    """Rewrite one table's blocks (make_block(path) renders it) in `pages` (default: those of
    PAGES holding its `start` marker)."""
    if pages is None:
        pages = [p for p in PAGES if p.is_file() and start in p.read_text()]
    if pages:
        text, start, end = make_block(path)
    for page in pages:
        page.write_text(readme.rewrite_text(page.read_text(), text, page.name, start, end))


def _setting(r: dict) -> str:
    if "oom" in r:
        return "out of memory"
    return (
        f"{r['step_s'] * 1e3:.0f} ms, MFU {100 * r['mfu']:.1f}% ({100 * r['mfu_causal_half']:.1f}%)"
    )


def _baseline_for(row: dict, kernel: str) -> tuple[str, dict]:
    """The baseline's result at the trainer's kernel where it ran that one, else at XLA's."""
    base = row["baseline"]
    return (kernel, base[kernel]) if kernel in base else ("xla", base["xla"])


def _same_math(model: dict) -> str:
    """What both sides of a record share beyond the shapes (a record from before the baseline
    took the logit caps has none to name)."""
    caps = model.get("baseline_logit_caps")
    if caps is None:
        return (
            "the experiment's optimizer on both sides (the baseline's from optax's pieces; "
            "the baseline without the logit caps)"
        )
    return (
        f"the experiment's logit caps ({caps['attention']:g} on attention, {caps['output']:g} "
        "on the output) and optimizer on both sides (the baseline's from optax's pieces)"
    )


def render_accelerator_table(records: list[dict]) -> str:
    """Markdown for the tpu_bench records: one row per (device, batch, remat, trainer kernel),
    each naming the kernel each side ran."""
    if not records:
        return "No accelerator run recorded yet: `python -m benchmarks.tpu_bench --record` on one."
    lines = [
        "| device | batch | remat | trainer: attention | trainer step, MFU (causal half) | "
        "baseline: attention | baseline step, MFU (causal half) | trainer / baseline | "
        "measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in records:
        m, model = rec["machine"], rec["model"]
        measured = f"{m['date']}, jax {m['jax']}, libtpu {m.get('libtpu') or '?'}"
        for row in rec["rows"]:
            for kernel, r in row["trainer"].items():
                base_kernel, base = _baseline_for(row, kernel)
                ratio = (
                    "—" if "oom" in r or "oom" in base else f"{r['step_s'] / base['step_s']:.3f}"
                )
                lines.append(
                    f"| {m['device']} | {row['batch']} | {row['remat']} | {kernel} | "
                    f"{_setting(r)} | {base_kernel} | {_setting(base)} | {ratio} | {measured} |"
                )
        lines.append("")
        lines.append(
            f"Model: {model['layers']} × {model['model_dims']}, FFN {model['hidden_dims']}, "
            f"{model['heads']} heads, seq {model['seq']}, vocab {model['vocab']} "
            f"({model['experiment'].rsplit('.', 1)[-1]} with NUM_LAYERS={model['layers']}), "
            f"bf16 activations, synthetic tokens, one chip, {_same_math(model)}, "
            f"{rec['steps']} timed steps per "
            f"setting; MFU against {rec['peak']['flops'] / 1e12:.0f} TFLOP/s "
            f"({rec['peak']['source']}) by the project's FLOP count, and in parentheses with "
            f"causal attention counted at half as MaxText counts it; an 8192³ bf16 matmul "
            f"measured {rec['measured_matmul_flops'] / 1e12:.0f} TFLOP/s in the same run "
            "(the lower figure where runs are joined). "
            f"Reproduce: `{rec['command']}`."
        )
    return "\n".join(lines).rstrip()


def accelerator_block(path: Path = BENCH_JSON) -> tuple[str, str, str]:
    records = [r for r in load(path) if r.get("kind") == ACCELERATOR]
    return render_accelerator_table(records), ACCEL_START, ACCEL_END


def record_accelerator(result: dict, path: Path = BENCH_JSON, pages=None) -> None:
    """Store a tpu_bench result (replacing the record of the same device) and rewrite the
    accelerator table's blocks in `pages` (default: those of PAGES that hold its markers)."""
    device = result["machine"]["device"]
    kept = [
        r for r in load(path) if r.get("kind") != ACCELERATOR or r["machine"]["device"] != device
    ]
    _store([*kept, result], path)
    _rewrite(accelerator_block, ACCEL_START, path, pages)
