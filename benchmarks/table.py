"""The performance table, generated from `bench --record`'s docs/bench.json (no jax here).

README.md and docs/benchmarks.md hold it between the markers below; tests/trainer/test_bench.py
and tests/docs check that the committed blocks equal the render of the committed docs/bench.json.
"""

import json
from pathlib import Path

from pax.releases import readme

ROOT = Path(__file__).resolve().parent.parent
BENCH_JSON = ROOT / "docs" / "bench.json"
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"
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


def recorded_table(path: Path = BENCH_JSON) -> str:
    return render_table(load(path))


PAGES = (ROOT / "README.md", ROOT / "docs" / "benchmarks.md")  # the files holding the table


def block(path: Path = BENCH_JSON) -> tuple[str, str, str]:
    """(text, start, end) for pax.docs.blocks.refresh: `./noxw -s readme` keeps it current too."""
    return recorded_table(path), START, END


def record(result: dict, path: Path = BENCH_JSON, readme_path: Path | None = None) -> None:
    """Store `result` in path (replacing the record of the same config and dtype) and rewrite
    the table's blocks (in readme_path, or in every page of PAGES) from the file."""
    records = [r for r in load(path) if key(r) != key(result)] + [result]
    path.write_text(json.dumps(sorted(records, key=key), indent=2) + "\n")
    for page in [readme_path] if readme_path else [p for p in PAGES if p.is_file()]:
        text = page.read_text()
        page.write_text(readme.rewrite_text(text, recorded_table(path), page.name, START, END))
