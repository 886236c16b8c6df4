"""Pax's entry point: python -m pax.main --exp=NAME --job_log_dir=DIR [--set KEY=VALUE ...].

Bad input (an unknown experiment, a bad override, a mesh that does not fit) is reported in one
line on stderr with exit status 2, before anything is written.
"""

import contextlib
import logging as std_logging
import os
import sys

from absl import app, flags, logging

from pax import envinfo
from pax.decode import decoder as decoder_lib
from pax.decode import job as decode_job
from pax.decode import options as decode_options
from pax.errors import PaxError, UsageError, report
from pax.experiments import base, describe, overrides, registry
from pax.parallel import accelerator, distributed
from pax.train import compile_cache, job_dir, loop, mfu, preemption
from pax.train.instantiate import instantiate

_PAX_DIR = os.path.dirname(os.path.abspath(__file__))

_EXP = flags.DEFINE_string(
    "exp", None, "Experiment name: tasks.lm.params.MODULE.CLASS or any unique dotted suffix of it."
)
_JOB_LOG_DIR = flags.DEFINE_string(
    "job_log_dir",
    None,
    "Job directory: checkpoints, summaries, metrics.jsonl, config.json, manifest.json.",
)
_MODE = flags.DEFINE_enum(
    "mode",
    "train",
    ["train", "eval", "decode_once", "decode"],
    "Train (resuming from the newest checkpoint), evaluate the newest checkpoint, decode prompts "
    "with the newest checkpoint (decode_once), or with each checkpoint as training writes it "
    "(decode); see pax.decode.",
)
_ENABLE_CHECKPOINT_SAVING = flags.DEFINE_bool(
    "enable_checkpoint_saving", True, "Save checkpoints while training."
)
_SET = flags.DEFINE_multi_string("set", [], "Override a hyper-parameter: --set NUM_LAYERS=2.")
_ALLOW_ENV_CHANGE = flags.DEFINE_bool(
    "allow_env_change",
    False,
    "Resume (or evaluate) a run last trained under another release or lock; recorded in its "
    "manifest.json as a new segment of its history. Without it that is refused (exit 2).",
)
_START_OVER_IF_DAMAGED = flags.DEFINE_bool(
    "start_over_if_damaged",
    False,
    "When every checkpoint of the job directory is damaged (they are moved to "
    "checkpoints_damaged/), train again from step 0. Without it that is refused (exit 2).",
)
_LIST = flags.DEFINE_bool(
    "list_experiments", False, "Print the registered experiments, one line each, and exit."
)
_DESCRIBE = flags.DEFINE_string(
    "describe",
    None,
    "Print experiment EXP's resolved hyper-parameters (with --set applied), each with where its "
    "value came from, and exit.",
)
_DATA_DIR = flags.DEFINE_string(
    "data_dir",
    None,
    "Directory of the C4 shards (c4-train.*-of-*"
    ".json.gz, c4-validation.*); sets DATA_DIR (default: "
    "$C4_DATA_DIR).",
)
_PMAP_USE_TENSORSTORE = flags.DEFINE_bool(
    "pmap_use_tensorstore",
    None,
    "pmap runs (no ICI_MESH_SHAPE): tensorstore-backed orbax "
    "checkpoints instead of single-file Flax ones; sets PMAP_USE_TENSORSTORE.",
)
# Multi-host, as Pax's multiprocess flags. Without them, a cluster jax detects (TPU pod slice,
# Slurm step, Open MPI) is joined on its own; a plain single-host run joins nothing.
_SERVER_ADDR = flags.DEFINE_string("server_addr", None, "Coordinator HOST:PORT (process 0).")
_NUM_HOSTS = flags.DEFINE_integer("num_hosts", 1, "Number of processes in the job.")
_HOST_IDX = flags.DEFINE_integer("host_idx", None, "This process's index, 0..num_hosts-1.")


def _parse_flags(argv):
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        sys.exit(report("pax", UsageError(str(e))))


def main(argv):
    if len(argv) > 1:
        raise UsageError(f"unexpected arguments {argv[1:]}; flags are written --name=value")
    if _LIST.value:
        print(describe.list_experiments())
        return 0
    if _DESCRIBE.value:
        registered = registry.get(_DESCRIBE.value)
        experiment_cls = overrides.apply(registered, _SET.value)
        print(describe.describe(experiment_cls, registry.name_of(registered)))
        return 0
    decoding = _MODE.value in ("decode_once", "decode")
    if not _EXP.value and not decoding:  # decoding takes the run's own (pax.decode.job)
        raise UsageError("--exp is required, e.g. --exp=tasks.lm.params.lm_cloud.LmCloudSpmdTiny")
    if not _JOB_LOG_DIR.value:
        raise UsageError("--job_log_dir is required, e.g. --job_log_dir=runs/tiny")
    # train and eval write into it; decoding only reads it
    job_dir.check(_JOB_LOG_DIR.value, writes=_MODE.value in ("train", "eval"))
    mfu.given_peaks(os.environ.get(mfu.GIVEN_PEAK, ""))  # mistyped: refused before any write
    # Flags that are hyper-parameters, applied like --set so config.json records them.
    flag_sets = [f"DATA_DIR={_DATA_DIR.value!r}"] if _DATA_DIR.value else []
    if _PMAP_USE_TENSORSTORE.value is not None:
        flag_sets.append(f"PMAP_USE_TENSORSTORE={_PMAP_USE_TENSORSTORE.value}")
    exp, sets, as_trained = _EXP.value, _SET.value + flag_sets, None
    if decoding:
        exp, sets, as_trained = decode_job.experiment_and_sets(_JOB_LOG_DIR.value, exp, sets)
    registered = registry.get(exp)
    name = registry.name_of(registered)
    experiment_cls = overrides.apply(registered, sets)
    base.resolve(experiment_cls)  # every value checked before any process joins or writes
    distributed.initialize(_SERVER_ADDR.value, _NUM_HOSTS.value, _HOST_IDX.value)
    accelerator.claim()  # a chip another process holds: one line naming it, before any output
    cache = compile_cache.enable()
    # Decoding reads no training input (a C4 experiment decodes --prompt without its data).
    run = instantiate(experiment_cls(), with_data=not decoding)
    # Decoding's own checks (checkpoint vs experiment, tokenizer, prompts, sampling) come
    # before the first log line too.
    decoder = (
        decoder_lib.Decoder(
            run, _JOB_LOG_DIR.value, decode_options.from_flags(), _MODE.value == "decode_once"
        )
        if decoding
        else None
    )
    # The run's first log line (once its input is known good: bad input stays one line) names
    # the environment, and says so loudly when it is not exactly a release lock.
    env = envinfo.describe()
    (logging.info if env["state"] == "exact" else logging.warning)("%s", envinfo.summary(env))
    if as_trained:
        logging.info("%s", as_trained)
    if cache:
        logging.info("compiled programs kept in %s (%s=none: off)", cache, compile_cache.VARIABLE)
    if _MODE.value == "train":
        loop.train(
            run,
            _JOB_LOG_DIR.value,
            name,
            _ENABLE_CHECKPOINT_SAVING.value,
            allow_env_change=_ALLOW_ENV_CHANGE.value,
            start_over_if_damaged=_START_OVER_IF_DAMAGED.value,
        )
        logging.info(
            "job directory: %s (metrics: %s/metrics.jsonl)", _JOB_LOG_DIR.value, _JOB_LOG_DIR.value
        )
        return 0
    if _MODE.value == "decode_once":
        decoder_lib.decode_once(decoder)
    elif _MODE.value == "decode":
        decoder_lib.follow(decoder)
    else:
        loop.evaluate(run, _JOB_LOG_DIR.value, name, _ALLOW_ENV_CHANGE.value)
    return 0


class _OnlyPaxInfo(std_logging.Filter):
    """Keeps the log readable: INFO lines from pax, warnings and errors from everyone."""

    def filter(self, record) -> bool:
        return record.levelno >= std_logging.WARNING or record.pathname.startswith(_PAX_DIR)


def _main_with_usage_errors(argv):
    """Exit status: 0 done, 1 the run failed (NaN/Inf loss, a checkpoint write failed),
    2 bad input, 75 stopped by SIGTERM/SIGINT: training after saving (rerun to resume),
    decoding and evaluating where they were (rerun to go on)."""
    logging.get_absl_handler().addFilter(_OnlyPaxInfo())
    # Decoding and evaluating have nothing to save first: a signal, from the start, stops them
    # where they are (a decode file is written whole, a temporary file renamed).
    saving = _MODE.value == "train"
    try:
        with contextlib.nullcontext() if saving else preemption.interrupting():
            return main(argv)
    except preemption.Preempted as e:
        preemption.ignore_signals()  # the exit is under way
        logging.warning("preempted: %s", e)
        sys.exit(preemption.EXIT_PREEMPTED)
    except preemption.Interrupted as e:
        logging.warning("--mode=%s stopped by %s; rerun the same command", _MODE.value, e.signal)
        sys.exit(preemption.EXIT_PREEMPTED)
    except PaxError as e:  # bad input (2), or a run that failed: NaN/Inf, a checkpoint (1)
        sys.exit(report("pax", e))


def run():
    app.run(_main_with_usage_errors, flags_parser=_parse_flags)


if __name__ == "__main__":
    run()
