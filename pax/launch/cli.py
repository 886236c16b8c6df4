"""`python -m pax.launch RELEASE tpu|gpu|slurm --exp=NAME [--set K=V ...] [options]`: write the
JobSet manifest or Slurm script pax.launch.render fills, and say on stderr what it is for."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pax.errors import ArgumentParser, UsageError, report
from pax.launch import plans
from pax.launch.render import RUNS_MOUNT, TARGETS, TEMPLATES, fill, template_values

# The options that are template_values' keyword arguments, by the same names.
TEMPLATE_OPTIONS = ("hosts", "tpu", "gpus_per_host", "registry", "name", "job_log_dir", "pvc")


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m pax.launch",
        description="Print a JobSet manifest (tpu, gpu) or Slurm batch script (slurm) that "
        "starts RELEASE's image across hosts.",
    )
    p.add_argument("release", help="a cut release, e.g. 1.4.0")
    p.add_argument("target", choices=sorted(TARGETS))
    p.add_argument("--exp", required=True, help="experiment, e.g. C4Spmd16BAdam32Replicas")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="hyper-parameter override, passed on to pax.main (repeatable)",
    )
    p.add_argument("--hosts", type=int, help="default: the experiment's mesh devices / per host")
    p.add_argument("--tpu", help="TPU slice, e.g. v4-64 (default: the v4 slice the mesh fills)")
    p.add_argument("--gpus-per-host", type=int, default=8)
    p.add_argument("--registry", help="HOST[:PORT][/PATH] the image was published to")
    p.add_argument("--name", help="JobSet / Slurm job name (default: pax-<experiment>)")
    p.add_argument(
        "--job-log-dir",
        help=f"default {RUNS_MOUNT}/NAME on the shared volume (slurm: $HOME/pax-runs/NAME)",
    )
    p.add_argument("--pvc", default="pax-runs", help="JobSets: the shared volume's claim")
    p.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    """Write the manifest or script (stdout, or -o); on stderr, what was written for which
    hosts and slice, and a warning for what is not known to work."""
    try:
        a = parser().parse_args(argv)
        options = {k: getattr(a, k) for k in TEMPLATE_OPTIONS}
        values = template_values(a.release, a.target, a.exp, a.set, **options)
        warnings = _warnings(a.target, a.registry, a.set, values)
    except UsageError as err:
        return report(PROGRAM, err)
    text = fill((TEMPLATES / TARGETS[a.target][0]).read_text(), values)
    if a.output is None:
        sys.stdout.write(text)
    else:
        a.output.write_text(text)
        if a.target == "slurm":
            a.output.chmod(0o755)
    print(f"{PROGRAM}: {summary(a.target, values, a.output)}", file=sys.stderr)
    for line in warnings:
        print(f"{PROGRAM}: warning: {line}", file=sys.stderr)
    return 0


PROGRAM = "pax cluster"


def summary(target: str, values: dict, output: Path | None) -> str:
    """One line: what was written, for which experiment, hosts, slice and image."""
    where = f"wrote {output}" if output else "printed"
    n = values["hosts"]
    hosts = f"{n} host{'s' if n > 1 else ''}"
    if target == "tpu":
        hosts = (
            f"a TPU {values['tpu_slice']} slice ({values['tpu_accelerator']}, topology "
            f"{values['tpu_topology']}: {hosts} x {values['chips_per_host']} chips)"
        )
    else:
        hosts += f" x {values['gpus_per_host']} GPUs"
    kind = "Slurm batch script" if target == "slurm" else "JobSet"
    return f"{where}: {kind} {values['name']}, {values['exp']} on {hosts}, image {values['image']}"


def _warnings(target: str, registry: str | None, sets: list[str], values: dict) -> list[str]:
    """What the cluster may not run: a local image name (refused for a JobSet, which pulls),
    a TPU slice no recorded plan shows working."""
    image = values["image"]
    if registry is None and target != "slurm":
        raise UsageError(
            f"no --registry: a cluster cannot pull the local image {image}; publish it "
            f"(./noxw -s publish -- {values['release']} {TARGETS[target][1]} --registry=HOST) "
            "and pass --registry=HOST"
        )
    found = []
    if registry is None:
        found.append(
            f"no --registry: the script runs the local image {image}, which each node must "
            "have (PAX_RUNTIME=docker), or PAX_IMAGE names one; pass --registry=HOST for "
            "pyxis and apptainer, which pull it"
        )
    if target == "tpu":
        slice_warning = plans.warning(
            values["exp"], list(sets), values["tpu_slice"], values["tpu_topology"]
        )
        found += [slice_warning] if slice_warning else []
    return found
