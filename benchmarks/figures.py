"""How the benchmarks hand on their figures: repeated timings as a spread (what
benchmarks.table renders), and --json files."""

import json
import statistics


def spread(values) -> dict:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def add_json_flag(parser) -> None:
    parser.add_argument("--json", help="also write the figures to this file")


def write_json(path: str | None, figures) -> None:
    """`figures` into `path` (nothing without one)."""
    if path:
        with open(path, "w") as f:
            json.dump(figures, f, indent=2)
