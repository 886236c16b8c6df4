"""What a job directory says it ran, for decoding it: its experiment and the `--set` values that
give its config.json.

Decoding reads a run's checkpoints, which mean something only under the configuration that
wrote them, and config.json records that configuration resolved. So decoding takes the run's
experiment from there, and the `--set`s that turn the registered experiment into the recorded
one; `--set`s given on the command line come after them, and the decoder's own check against
config.json refuses one that changes what the parameters compute.
"""

import json
import os
import shlex

from pax.errors import UsageError
from pax.experiments import config as config_lib
from pax.experiments import registry
from pax.train import job_config

# Resolved from the devices when a run starts (a -1 in the mesh, the pipeline's microbatches):
# the checkpoint is read onto whatever mesh decodes it.
_FROM_THE_DEVICES = ("task.mesh.ici_mesh_shape", "task.mesh.num_microbatches")


def experiment_and_sets(
    job_dir: str, exp: str | None, sets: list[str]
) -> tuple[str, list[str], str | None]:
    """(experiment, --set values, the line that says so) to decode `job_dir` with: the run's
    own, then `sets`. The line is logged once the decoder's checks passed (bad input stays one
    line).

    `exp` (the --exp flag, or None) must name the run's experiment. A run of an experiment this
    checkout does not register (or without config.json) decodes with `exp` and `sets` as given
    (and no line).
    """
    path = os.path.join(job_dir, job_config.FILE)
    written = _read(path)
    recorded = written.get("experiment") if written else None
    if not isinstance(recorded, str) or recorded not in registry.names():
        if exp is None:
            raise UsageError(
                f"{job_dir} holds no run this checkout can name (no config.json, or an experiment "
                "it does not register): give --exp and the --set values it was trained with"
            )
        return exp, list(sets), None
    if exp is not None and registry.name_of(registry.get(exp)) != recorded:
        raise UsageError(
            f"{job_dir} holds a run of {recorded}, not {exp}; decoding takes the run's own "
            f"experiment from its {job_config.FILE}: drop --exp"
        )
    fresh = {"task": config_lib.to_dict(registry.get(recorded)().task())}
    own = job_config.sets_restoring(
        {"task": written.get("task", {})}, fresh, skip=_FROM_THE_DEVICES
    )
    shown = "".join(f" --set {shlex.quote(s)}" for s in own)
    line = f"decoding {job_dir} as it was trained: --exp={recorded}{shown} (its {job_config.FILE})"
    return recorded, own + list(sets), line


def _read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise UsageError(f"{path} is not JSON ({e}); it records what the run trained") from None
