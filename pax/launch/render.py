"""Cluster manifests that start a release's images across hosts: a Kubernetes JobSet for a TPU
slice (GKE) or a GPU node pool, and a Slurm batch script.

    python -m pax.launch RELEASE tpu|gpu|slurm --exp=NAME [--set K=V ...] [options]

The templates sit beside this file. `{{key}}` is replaced by its value; a list-valued
placeholder alone on a line becomes one line per item at that indentation (zero items: a blank
line). The experiment's mesh (read through pax.experiments, which imports no jax) fixes how
many devices the job needs, and so the host count, which is checked rather than trusted.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

from pax.errors import UsageError
from pax.experiments import overrides  # jax-free: classes of numbers
from pax.experiments import registry as experiments
from pax.launch import tpu_slices, xla_flags
from pax.releases import catalog as dist_release

TEMPLATES = Path(__file__).resolve().parent / "templates"
# target -> (template, image platform)
TARGETS = {
    "tpu": ("jobset-tpu.yaml", "tpu"),
    "gpu": ("jobset-gpu.yaml", "gpu"),
    "slurm": ("slurm.sbatch", "gpu"),
}
CHIPS_PER_TPU_HOST = 4  # every multi-host TPU VM of pax.launch.tpu_slices: v4, v5p, v5e, v6e
COORDINATOR_PORT = 8482  # jax's own default for TPU coordinators
RUNS_MOUNT = "/runs"  # where the JobSets mount the shared volume
_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# What the JobSet admission webhook (v0.12.0, pkg/webhooks/jobset_webhook.go) requires of the
# names it will generate: Job `<jobset>-<replicated job>-<job index>` and pod
# `<job>-<pod index>` plus the Job controller's random "-xxxxx" are DNS-1035 labels.
_DNS_1035_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_LABEL_MAX = 63
REPLICATED_JOB = "workers"  # the templates' one replicated job, with one Job (replicas: 1)
POD_NAME_SUFFIX = "-abcde"  # the webhook's stand-in for the random suffix
_PATH_RE = re.compile(r"[\w./~$-]+")
_IMAGE_REGISTRY_RE = re.compile(r"[\w.-]+(:\d+)?(/[\w.-]+)*")
_PLACEHOLDER_RE = re.compile(r"\{\{(\w+)\}\}")


def tpu_slice(name: str, devices: int | None = None) -> tpu_slices.Slice:
    """--tpu in any of pax.launch.tpu_slices' spellings -> the slice a JobSet asks for; a
    generation alone is the slice of `devices` chips. UsageError for what the JobSet cannot
    place: less than a whole host."""
    found = tpu_slices.parse(name)
    if found.chips is None:
        if devices is None:
            raise UsageError(f"--tpu={name} names no size and the mesh none; e.g. --tpu={name}-8")
        found = found.sized(devices)
    if found.chips < CHIPS_PER_TPU_HOST:
        bigger = found.sized(2 * CHIPS_PER_TPU_HOST)
        raise UsageError(
            f"TPU slice {name!r} has {found.chips} chips; these manifests take whole hosts of "
            f"{CHIPS_PER_TPU_HOST} chips, e.g. --tpu={bigger.name}"
        )
    return found


def check_jobset_name(name: str, hosts: int) -> None:
    """UsageError unless the JobSet webhook accepts `name` for a JobSet of `hosts` pods."""
    pod = f"{name}-{REPLICATED_JOB}-0-{hosts - 1}{POD_NAME_SUFFIX}"
    if not _DNS_1035_RE.fullmatch(name):
        fixed = re.sub(r"[^-a-z0-9]+", "-", name.lower()).strip("-") or "run"
        fixed = fixed if fixed[0].isalpha() else f"pax-{fixed}"
        raise UsageError(
            f"bad --name {name!r}: the JobSet's Jobs and pods are named after it ({pod[:-6]}-...), "
            "so it must start with a lower-case letter and hold only lower-case letters, digits "
            f"and '-' (a DNS-1035 label), e.g. --name={fixed}"
        )
    if len(pod) > _DNS_LABEL_MAX:
        room = _DNS_LABEL_MAX - (len(pod) - len(name))
        raise UsageError(
            f"bad --name {name!r}: {len(name)} characters make pod names like "
            f"{pod[: -len(POD_NAME_SUFFIX)]}-xxxxx ({len(pod)} characters), over the "
            f"{_DNS_LABEL_MAX} the JobSet webhook allows; use at most {room} characters"
        )


def mesh_devices(experiment_cls: type) -> int | None:
    """Devices the experiment's mesh needs (ICI x DCN); None without a mesh, or with a -1 in
    it (either takes any number)."""
    if experiment_cls.ICI_MESH_SHAPE is None or -1 in experiment_cls.ICI_MESH_SHAPE:
        return None
    return math.prod(experiment_cls.ICI_MESH_SHAPE) * math.prod(experiment_cls.DCN_MESH_SHAPE or ())


def fill(template: str, values: dict) -> str:
    """Replace the {{key}} placeholders; each one needs a value."""
    missing = sorted(set(_PLACEHOLDER_RE.findall(template)) - set(values))
    if missing:
        raise KeyError(f"template placeholders without a value: {', '.join(missing)}")

    def lines(m: re.Match) -> str:
        return "\n".join(m.group(1) + item for item in values[m.group(2)])

    lists = "|".join(k for k, v in values.items() if isinstance(v, list))
    if lists:
        template = re.sub(rf"(?m)^([ \t]*)\{{\{{({lists})\}}\}}[ \t]*$", lines, template)
    return _PLACEHOLDER_RE.sub(lambda m: str(values[m.group(1)]), template)


def _gpu_hosts(exp: str, devices: int | None, per_host: int, hosts: int | None) -> int:
    if per_host < 1 or (hosts is not None and hosts < 1):
        raise UsageError("--hosts and --gpus-per-host take at least 1")
    if devices is None:
        return hosts or 1
    if devices % per_host or (hosts is not None and hosts * per_host != devices):
        fix = (
            f"--hosts={devices // per_host}"
            if devices % per_host == 0
            else "--gpus-per-host that divides it"
        )
        raise UsageError(
            f"{exp}'s mesh needs {devices} GPUs, not {hosts or 'a whole number of'}"
            f" hosts x {per_host}: use {fix}, or override the mesh with --set "
            f"'ICI_MESH_SHAPE=[...]'"
        )
    return devices // per_host


def _tpu_values(
    exp: str, devices: int | None, dcn: int, tpu: str | None, hosts: int | None
) -> dict:
    if dcn > 1:
        raise UsageError(f"{exp} spans several slices (DCN_MESH_SHAPE); this JobSet runs one")
    if tpu is None and devices is None:
        raise UsageError(
            f"{exp} has no mesh (data-parallel over any number of chips): "
            f"choose the slice, e.g. --tpu=v4-8"
        )
    found = tpu_slice(tpu or "v4", devices)  # Pax ran its reference experiments on v4
    if devices is not None and found.chips != devices:
        raise UsageError(
            f"{exp}'s mesh needs {devices} chips but {tpu} has {found.chips}: use "
            f"--tpu={found.sized(devices).name}, or override the mesh with --set "
            f"'ICI_MESH_SHAPE=[...]'"
        )
    if hosts is not None and hosts * CHIPS_PER_TPU_HOST != found.chips:
        raise UsageError(
            f"--hosts={hosts} disagrees with --tpu={found.name}: "
            f"{found.chips // CHIPS_PER_TPU_HOST} hosts of {CHIPS_PER_TPU_HOST} chips; "
            f"drop --hosts"
        )
    return dict(
        tpu_slice=found.name,
        tpu_accelerator=found.generation.gke,
        tpu_topology=found.topology,
        chips_per_host=CHIPS_PER_TPU_HOST,
        hosts=found.chips // CHIPS_PER_TPU_HOST,
    )


def render(release: str, target: str, exp: str, sets: list[str] = (), **options) -> str:
    """The filled-in manifest (JobSet YAML) or batch script; UsageError on bad input. OPTIONS:
    template_values's."""
    values = template_values(release, target, exp, sets, **options)
    return fill((TEMPLATES / TARGETS[target][0]).read_text(), values)


def template_values(
    release: str,
    target: str,
    exp: str,
    sets: list[str] = (),
    *,
    hosts: int | None = None,
    tpu: str | None = None,
    gpus_per_host: int = 8,
    registry: str | None = None,
    name: str | None = None,
    job_log_dir: str | None = None,
    pvc: str = "pax-runs",
) -> dict:
    """The template's values, checked (UsageError on bad input)."""
    if target not in TARGETS:
        raise UsageError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
    platform = TARGETS[target][1]
    if dist_release.list_releases():  # a checkout: the release must be one of its cut ones
        try:
            release = dist_release.resolve(release).version
        except dist_release.UnknownRelease as err:
            raise UsageError(str(err)) from None
    elif re.fullmatch(r"[vr]?\d+(\.\d+)*", release):  # an installed package: a version
        release = release.lstrip("vr")
    else:
        raise UsageError(f"bad release {release!r}: write a version, e.g. 1.4.0")
    registered = experiments.get(exp)
    exp = experiments.name_of(registered)
    experiment_cls = overrides.apply(registered, list(sets))
    devices = mesh_devices(experiment_cls)
    values = {
        "release": release,
        "exp": exp,
        "gpus_per_host": gpus_per_host,
        "pvc": pvc,
        "port": COORDINATOR_PORT,
        "runs_mount": RUNS_MOUNT,
        # JSON is a YAML string and, without quotes or '$', safe inside the script's "${...-...}"
        "gpu_xla_flags": json.dumps(xla_flags.value()) if target == "gpu" else xla_flags.value(),
    }
    if target == "tpu":
        dcn = math.prod(experiment_cls.DCN_MESH_SHAPE or ())
        values.update(_tpu_values(exp, devices, dcn, tpu, hosts))
    else:
        values["hosts"] = _gpu_hosts(exp, devices, gpus_per_host, hosts)
    name = name or "pax-" + exp.rsplit(".", 1)[1].lower()
    if target == "slurm":
        if not _NAME_RE.fullmatch(name):
            raise UsageError(f"bad --name {name!r}: lower-case letters, digits and '-'")
    else:
        check_jobset_name(name, values["hosts"])
    if not _NAME_RE.fullmatch(pvc):
        raise UsageError(f"bad --pvc {pvc!r}: a PersistentVolumeClaim name")
    if registry is not None and not _IMAGE_REGISTRY_RE.fullmatch(registry):
        raise UsageError(f"bad --registry {registry!r}: write HOST[:PORT][/PATH]")
    values["name"] = name
    values["image"] = f"{registry + '/' if registry else ''}pax:{release}-{platform}"
    runs = "$HOME/pax-runs" if target == "slurm" else RUNS_MOUNT
    values["job_log_dir"] = job_log_dir or f"{runs}/{name}"
    if not _PATH_RE.fullmatch(values["job_log_dir"]):
        raise UsageError(f"bad --job-log-dir {job_log_dir!r}: letters, digits and ./_~$- only")
    if target != "slurm" and not values["job_log_dir"].startswith(RUNS_MOUNT + "/"):
        raise UsageError(
            f"--job-log-dir must lie under {RUNS_MOUNT}/, where the shared volume "
            f"(--pvc) is mounted"
        )
    quote = shlex.quote if target == "slurm" else (lambda arg: "- " + json.dumps(arg))
    values["sets"] = [quote(f"--set={s}") for s in sets]
    return values
