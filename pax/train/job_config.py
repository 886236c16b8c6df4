"""config.json: the resolved experiment a job directory was started with, checked on resume.

Rerunning the same command resumes; rerunning with another configuration in the same directory
would silently mix two runs (or, before this check, set every checkpoint aside as damaged), so
it is a usage error that names what differs, and nothing in the directory is touched. Fields
that only say how long to run, how often to report and how to keep files may change between
runs: they do not change what the checkpoints mean.
"""

import json
import os
import shlex

from pax.errors import UsageError
from pax.experiments import config as config_lib
from pax.experiments.base import BaseExperiment

FILE = "config.json"
# Leaf names (any nesting) a resumed run may change. Upper-case hyper-parameter spellings, should
# config.json ever carry them, are the same names upper-cased.
RESUMABLE = frozenset({
    "num_train_steps", "summary_every_n_steps", "eval_every_n_steps", "eval_num_batches",
    "checkpoint_every_n_steps", "checkpoint_max_to_keep", "async_checkpointing", "nan_policy",
    "bad_record_policy", "data_dir", "target_log_pplx",
    "whole_split",  # the eval split's reading, which follows eval_num_batches
})  # fmt: skip


def as_written(config: dict) -> dict:
    """`config` as it reads back from config.json (tuples become lists, odd types strings)."""
    return json.loads(json.dumps(config, default=str))


def check(job_dir: str, config: dict) -> None:
    """UsageError if job_dir/config.json describes another configuration than `config`."""
    path = os.path.join(job_dir, FILE)
    try:
        with open(path) as f:
            written = json.load(f)
    except FileNotFoundError:
        return
    except ValueError as e:
        raise UsageError(
            f"{path} is not JSON ({e}); it records what this job directory holds: restore it, "
            "or use a new --job_log_dir"
        ) from None
    theirs, ours = written.get("experiment"), config.get("experiment")
    if theirs != ours and isinstance(theirs, str):
        raise UsageError(
            f"{job_dir} holds a run of {theirs}, not {ours}; nothing was changed. Use a new "
            f"--job_log_dir for {ours}, or resume that run with --exp={theirs}"
        )
    differences = [
        d
        for d in _differences(written, as_written(config))
        if not _resumable(d[0]) and not _new_field_at_default(*d)
    ]
    if not differences:
        return
    path_name, before, now = differences[0]
    more = f" (and {len(differences) - 1} more)" if len(differences) > 1 else ""
    back = _sets_back(differences)
    was = "absent" if before is _ABSENT else json.dumps(before)
    raise UsageError(
        f"{job_dir} holds a run of another configuration: {path_name} is {was} "
        f"in its {FILE}, {json.dumps(now)} in this run{more}; nothing was changed. Use a new "
        f"--job_log_dir for this configuration"
        + (
            f", or resume that run with {back}"
            if back
            else ", or resume with the experiment and --set values its config.json records"
        )
    )


def _differences(before, now, path=""):
    """[(dotted path, before, now)] of the leaves that differ."""
    if isinstance(before, dict) and isinstance(now, dict):
        out = []
        for key in sorted(before.keys() | now.keys()):
            sub = f"{path}.{key}" if path else key
            out += _differences(before.get(key, _ABSENT), now.get(key), sub)
        return out
    if isinstance(before, list) and isinstance(now, list) and len(before) == len(now):
        return [
            d
            for i, (b, n) in enumerate(zip(before, now))
            for d in _differences(b, n, f"{path}[{i}]")
        ]
    return [] if before == now else [(path, before, now)]


# A key that an older config.json does not have.
_ABSENT = object()


def _new_field_at_default(path: str, before, now) -> bool:
    """A hyper-parameter added since the job directory was written, at its default here: the
    default keeps the behaviour the run had, so it is the same configuration."""
    param = config_lib.PARAMS.get(path.rsplit(".", 1)[-1].upper())
    return before is _ABSENT and param is not None and as_written(param.default) == now


def _resumable(path: str) -> bool:
    return path.rsplit(".", 1)[-1].lower() in RESUMABLE


def _sets_back(differences) -> str:
    """`--set NAME=VALUE ...` restoring the differing hyper-parameters, quoted for the shell."""
    return " ".join(f"--set {shlex.quote(s)}" for s in _restoring(differences))


def sets_restoring(written: dict, config: dict, skip: tuple[str, ...] = ()) -> list[str]:
    """`NAME=VALUE` overrides that give `config` (a resolved experiment, as config.json holds
    one) the hyper-parameters `written` records, where they differ; leaves under the dotted
    paths in `skip` are left as `config` has them."""
    differences = _differences(written, as_written(config))
    return _restoring([d for d in differences if not d[0].startswith(skip)])


def _restoring(differences) -> list[str]:
    """`NAME=VALUE` for each differing hyper-parameter, once. Only the task's own fields:
    `datasets` repeats what the task derives (the training input's seed is SEED's), so their
    leaves would name the wrong hyper-parameter."""
    values = {}
    for path, old, _ in differences:
        name = path.rsplit(".", 1)[-1].upper()
        if path.startswith("task.") and old is not _ABSENT and hasattr(BaseExperiment, name):
            values.setdefault(name, []).append(old)
    return [
        f"{name}={_literal(olds[0])}"
        for name, olds in sorted(values.items())
        if all(o == olds[0] for o in olds)
    ]


def _literal(value) -> str:
    """`value` as --set reads it back."""
    if isinstance(value, str) and value.isidentifier():
        return value  # a bare word is a string to --set
    if isinstance(value, list):
        return json.dumps(value, separators=(",", ":"))
    return repr(value)
