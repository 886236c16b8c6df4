"""Blocks rendered from sources outside the releases: the GPU XLA flags (pax.launch.xla_flags),
the TPU slice names (pax.launch.tpu_slices) and the reference bands (pax.curves). `refresh` hands them to pax.releases.readme, which owns
the marker mechanism and its own blocks (releases table, support matrix, changelog pins).

    <!-- gpu-xla-flags:start -->          the flags, why each, the value (docs pages)
    # gpu-xla-flags:start                 Dockerfile.gpu's ENV line
    <!-- tpu-slices:start -->             the TPU slice names --tpu takes (docs/parallelism.md)
    <!-- reference-band:NAME:start -->    a band's checks, limit and calibration verdicts
"""

from __future__ import annotations

from pathlib import Path

from pax.curves import judge_recorded, load_reference, reference_names
from pax.curves.stats import tolerance
from pax.launch import tpu_slices, xla_flags
from pax.releases import readme


def band_markers(name: str) -> tuple[str, str]:
    return f"<!-- reference-band:{name}:start -->", f"<!-- reference-band:{name}:end -->"


def _final(curves: dict, split_prefix: str) -> str:
    for split, metrics in sorted(curves.items()):
        if split.startswith(split_prefix) and metrics.get("loss"):
            step, value = max(metrics["loss"].items(), key=lambda kv: int(kv[0]))
            return f"{value:.3f} @ {step}"
    return "—"


def render_band(name: str) -> str:
    """One reference: its seeds and command, each check's mean and std, the limit, and how
    its held-out seeds and broken runs are judged now."""
    ref = load_reference(name)
    checks = len(ref.stats)
    limit = tolerance(ref.alpha, checks, ref.n)
    release = {r.get("release") for r in ref.runs}
    devices = {(r.get("devices") or {}).get("platform") for r in ref.runs}
    lines = [
        f"{ref.n} seeds ({', '.join(str(s) for s in ref.seeds())}) of release "
        f"{', '.join(sorted(str(r) for r in release))} on "
        f"{', '.join(sorted(str(d) for d in devices))}, recorded {ref.recorded_at} by",
        "",
        "```sh",
        ref.recorded_by,
        "```",
        "",
        f"A run is OUTSIDE when any check lies more than {limit:.2f} seed stds from the seeds' "
        f"mean ({checks} checks, false-alarm rate {ref.alpha:g}, {ref.n - 1} degrees of "
        "freedom).",
        "",
        "| check | mean | std |",
        "|---|---|---|",
    ]
    lines += [f"| {s.check.label} | {s.mean:.3f} | {s.std:.3f} |" for s in ref.stats]
    if ref.calibration:
        lines += [
            "",
            "| run (not in the band) | final train loss | final eval loss | deciding check | "
            "deviation | verdict |",
            "|---|---|---|---|---|---|",
        ]
        for kind, entries in ref.calibration.items():
            for entry in entries:
                fault = entry.get("fault")
                label = (
                    f"{fault['description']} (`{fault['name']}`)"
                    if fault
                    else f"{kind.replace('_', '-')} seed {entry.get('seed')}"
                )
                verdict = judge_recorded(entry, ref)
                row = verdict.deciding
                word = {0: "inside", 1: "OUTSIDE"}.get(verdict.code, "cannot judge")
                lines.append(
                    f"| {label} | {_final(entry['curves'], 'train')} | "
                    f"{_final(entry['curves'], 'eval')} | "
                    f"{row.stat.check.label if row else '—'} | "
                    f"{f'{row.dev:+.2f} s' if row else '—'} | {word} |"
                )
    return "\n".join(lines)


def generated() -> list[tuple[str, str, str]]:
    """(text, start, end) of every block this module renders."""
    blocks = [
        (xla_flags.docs_table(), xla_flags.DOCS_START, xla_flags.DOCS_END),
        (tpu_slices.docs_table(), tpu_slices.DOCS_START, tpu_slices.DOCS_END),
        (xla_flags.dockerfile_block(), xla_flags.DOCKERFILE_START, xla_flags.DOCKERFILE_END),
    ]
    blocks += [(render_band(name), *band_markers(name)) for name in reference_names()]
    return blocks


def main(root: Path, check: bool = False, extra=(), log=print) -> None:
    """`./noxw -s readme -- [--check]`: rewrite (check: compare) every generated block and log
    each file; readme.ReadmeError when one cannot be rendered, or (check) one is out of date."""
    changed = refresh(root, check=check, extra=extra)
    for path in changed:
        log(f"readme: {path.relative_to(root)} {'is out of date' if check else 'rewritten'}")
    if check and changed:
        raise readme.ReadmeError("readme: generated blocks out of date; run ./noxw -s readme")
    if not changed:
        log("readme: every generated block is up to date")


def refresh(root: Path | None = None, check: bool = False, extra=()) -> list[Path]:
    """Rewrite every generated block, and the `extra` ones (text, start, end), in README.md,
    releases/README.md, CHANGELOG.md, Dockerfile.gpu and docs/*.md; the files that changed
    (check: would change)."""
    blocks = [*generated(), *extra]
    return readme.refresh(root, readme.all_files(root), check=check, extra=blocks)
