"""Running pax in a release's pinned env, as nox's train, decode and aot sessions do: pax.main's
flags with the tiny run's defaults, what the run left in its job directory, and the env
pax.aot plans in."""

from __future__ import annotations

from pathlib import Path

TINY = {
    "--exp": "tasks.lm.params.lm_cloud.LmCloudSpmdTiny",
    "--job_log_dir": "runs/tiny",
}
# Decoding takes the experiment and its --set values from the job directory (pax.decode.job).
DECODE = {"--job_log_dir": TINY["--job_log_dir"], "--mode": "decode_once"}


def with_defaults(args: list[str], defaults: dict[str, str]) -> list[str]:
    """`args` (`--flag=value` or `--flag value`) after each default the caller did not give."""
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    return [f"{k}={v}" for k, v in defaults.items() if k not in given] + list(args)


def flag_value(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


def job_report(flags: list[str], root: Path) -> list[str]:
    """What a run left: its job directory (relative ones from root) and its metrics.jsonl files,
    or the one that was not written; one line each."""
    job_dir = Path(flag_value(flags, "--job_log_dir"))
    job_dir = job_dir if job_dir.is_absolute() else root / job_dir
    metrics = sorted(job_dir.rglob("metrics.jsonl")) if job_dir.is_dir() else []
    found = metrics or [job_dir / "metrics.jsonl (not written)"]
    return [f"job dir: {job_dir}", *(f"metrics: {path}" for path in found)]


def pop_aot_platform(args: list[str]) -> str:
    """The env `./noxw -s aot` plans in: a leading tpu|gpu popped off ARGS, else gpu where --gpu
    names a GPU to plan for, else tpu (whose libtpu compiles for a TPU topology on this CPU)."""
    if args[:1] in (["tpu"], ["gpu"]):
        return args.pop(0)
    return "gpu" if any(a.split("=")[0] == "--gpu" for a in args) else "tpu"
