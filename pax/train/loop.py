"""The train and eval loops: every side effect (files, logs) lives here, around pure steps.

A run (pax.train.instantiate; its job directory checked by pax.train.job_dir) is trained in the
order this file reads: the newest checkpoint restored, config.json and manifest.json written,
then the steps, each saving, summarizing and evaluating on its schedule; `evaluate` restores and
evaluates once."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from pax import data, envinfo
from pax.checkpoint.manager import Checkpointer
from pax.errors import PaxError, UsageError
from pax.experiments import config as config_lib
from pax.parallel import pipeline
from pax.train import job_config, manifest, mfu, placement, preemption
from pax.train import state as state_lib
from pax.train import summaries as summaries_lib
from pax.train.instantiate import TrainingRun


def train(
    run: TrainingRun,
    job_dir: str,
    experiment_name: str,
    checkpoint_saving: bool = True,
    on_summary=None,
    allow_env_change: bool = False,
    start_over_if_damaged: bool = False,
) -> dict:
    """Train to NUM_TRAIN_STEPS, resuming from the newest good checkpoint in job_dir.

    on_summary(step, values), if given, runs after each train summary and is not counted in the
    next step time (benchmarks/bench.py interleaves other loops with the trainer's this way).
    allow_env_change: resume a run last trained under another release or lock (a new segment
    of its history) instead of refusing. start_over_if_damaged: train from step 0 when every
    checkpoint is damaged instead of refusing.

    Returns the last train metrics ({} when the run had already finished). Raises Preempted
    after saving on SIGTERM/SIGINT, NonFiniteError (NAN_POLICY=stop) and CheckpointError (a
    save failed).
    """
    # Another configuration's job directory is a usage error on every process, found before
    # anything is written: first by config.json, then by the checkpoint's own metadata.
    job_config.check(job_dir, _config(run, experiment_name))
    cfg = run.task.train
    place = placement.for_run(run)
    checkpointer = place.checkpointer(job_dir, checkpoint_saving)
    with contextlib.closing(checkpointer):  # orbax's threads end with the run, however it ends
        history = manifest.read(job_dir)
        latest = checkpointer.latest_step()
        if latest is not None:
            manifest.check_resume(job_dir, history, latest, envinfo.describe(), allow_env_change)
        stream = data.stream(run.train_data)  # C4: its position is saved with every checkpoint
        # Restored even when the run is finished: that checks the checkpoint is this model's.
        restored, state = checkpointer.restore_latest(
            place.abstract, stream, start_over=start_over_if_damaged
        )
        if restored is not None and restored >= cfg.num_train_steps:
            if jax.process_index() == 0:
                logging.info(
                    "%s is finished (checkpoint at step %d, NUM_TRAIN_STEPS=%d): nothing to do; "
                    "a larger NUM_TRAIN_STEPS (--set) trains it further",
                    job_dir,
                    restored,
                    cfg.num_train_steps,
                )
            return {}
        peak, summaries = _setup(run, job_dir, experiment_name, history, "train", restored or 0)
        if jax.process_index() == 0:  # logs come from process 0 only
            _log_header(run, place, experiment_name, peak)
        if state is None:
            state = place.init(cfg.seed)
        elif jax.process_index() == 0:
            logging.info("resumed from %s/checkpoint_%08d", checkpointer.directory, restored)
        step = int(jax.device_get(state["step"]))
        state = place.place(state)
        edges = _Edges(checkpointer, stream, summaries, peak, on_summary)
        try:
            return _train_steps(run, place, state, step, edges)
        finally:
            summaries.close()


def _config(run: TrainingRun, experiment_name: str) -> dict:
    """What config.json records: the fully resolved experiment."""
    return {
        "experiment": experiment_name,
        "task": config_lib.to_dict(run.task),
        "datasets": [config_lib.to_dict(d) for d in run.datasets],
    }


def _setup(
    run: TrainingRun, job_dir: str, experiment_name: str, history, mode: str, from_step: int
):
    """Creates the job directory with config.json and manifest.json; returns (peak, summaries).

    Called once the job directory is known to hold this configuration's run (job_config.check,
    and the checkpoint's own metadata when restoring), so it overwrites nothing of another run.
    `history` is the manifest already there (None for a new run): this environment is added to
    it as a segment from `from_step` when it is not the one that last ran it."""
    config = _config(run, experiment_name)
    is_writer = jax.process_index() == 0
    if is_writer:
        os.makedirs(job_dir, exist_ok=True)
    devices = list(run.mesh.devices.flat)
    peak = mfu.peak_flops(devices, run.task.model.fprop_dtype)
    if is_writer:
        _write_json(os.path.join(job_dir, job_config.FILE), config)
        described = manifest.environment(devices, run.mesh, peak)
        updated = manifest.with_segment(history, described, mode, from_step)
        if updated is not None:
            _write_json(os.path.join(job_dir, manifest.FILE), updated)
            if len(updated["segments"]) > 1:
                logging.info(
                    "%s %s from step %d: segment %d of this run's history in %s",
                    manifest.name(updated["segments"][-1]),
                    "trains" if mode == "train" else "evaluates",
                    from_step,
                    len(updated["segments"]),
                    manifest.FILE,
                )
    return peak, summaries_lib.Summaries(job_dir, enabled=is_writer)


def _write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, default=str)
    os.replace(tmp, path)


def _log_header(run: TrainingRun, place, experiment_name: str, peak: dict) -> None:
    logging.info(
        "%s: %.2fM parameters, %s over %s, global batch %d, peak %.3g FLOP/s (%s)",
        experiment_name,
        state_lib.num_params(place.abstract, run.task.model) / 1e6,
        "pmap" if run.strategy == placement.PMAP else "mesh",
        dict(run.mesh.shape),
        run.global_batch,
        peak["flops"],
        peak["source"],
    )
    # Where the large weights live (pmap keeps a whole replica on every device by design).
    if run.strategy != placement.PMAP:
        for line in state_lib.sharding_lines(place.abstract):
            logging.info("sharding: %s", line)
    if run.task.mesh.num_stages > 1:
        logging.info(
            "pipeline: %d stages, %d microbatches, bubble fraction %.3f",
            run.task.mesh.num_stages,
            run.task.mesh.num_microbatches,
            pipeline.bubble_fraction(run.task.mesh.num_stages, run.task.mesh.num_microbatches),
        )


@dataclasses.dataclass
class _Edges:
    """Where the training steps' side effects go."""

    checkpointer: Checkpointer
    stream: object  # the C4 stream whose position each checkpoint saves; None for other data
    summaries: summaries_lib.Summaries
    peak: dict  # mfu.peak_flops
    on_summary: object  # train's on_summary


def _train_steps(run: TrainingRun, place, state, step: int, edges: _Edges) -> dict:
    """Steps from `step` to NUM_TRAIN_STEPS (fewer when TARGET_LOG_PPLX is reached), saving,
    summarizing and evaluating on their schedules; returns the last train summary."""
    cfg = run.task.train
    first_step, total = step, cfg.num_train_steps
    last, unchecked, timer = {}, [], _StepTimer()
    with preemption.SignalCatcher() as signals:
        while step < total:
            state, metrics = place.train_step(state, place.batch(run.train_data, step))
            metrics = place.metrics(metrics)
            step += 1
            timer.step_done(metrics)
            # jax returns before a step has run: without a wait the loop would queue steps up
            # to the next read-back (a summary, a checkpoint), and a signal would stop the run
            # only after all of them. Waiting for the step before this one keeps one step
            # queued behind the one running, enough to keep the devices busy.
            if unchecked:
                jax.block_until_ready(unchecked[-1][1])
            unchecked.append((step, metrics["finite"]))
            # Every process gets the same answer at the same step (preemption.py), so all
            # of them save this step together; a signal landing later waits for the next.
            stop = signals.stop_at(step - first_step)
            at_checkpoint = step % cfg.checkpoint_every_n_steps == 0 or step == total
            at_summary = step % cfg.summary_every_n_steps == 0 or step == total
            if at_checkpoint or at_summary or stop:
                _check_finite(unchecked, cfg.nan_policy, edges.checkpointer)
                unchecked = []
            if at_summary:
                last = _train_summary(run, step, metrics, timer, edges)
                if edges.on_summary is not None:
                    edges.on_summary(step, last)
                    timer.restart()
            if at_checkpoint or stop:
                # Every row up to this step is on disk before its checkpoint: a run killed after
                # the save resumes past those steps and would never write them again.
                edges.summaries.flush()
                edges.checkpointer.save(step, place.unplace(state), edges.stream)
            if step % cfg.eval_every_n_steps == 0 or step == total:
                results = _evaluate(run, place, state_lib.model_variables(state))
                _write_evals(step, results, edges.summaries)
                timer.restart()
                if _reached_target(results, cfg.target_log_pplx, step):
                    if not (at_checkpoint or stop):
                        edges.checkpointer.save(step, place.unplace(state), edges.stream)
                    break
            if stop:
                raise preemption.Preempted(step, signals.reason())
    return last


class _StepTimer:
    """Step time over the steps since the last reading; the first step (compilation) excluded."""

    def __init__(self):
        self.start, self.steps = None, 0

    def step_done(self, metrics) -> None:
        if self.start is None:
            jax.block_until_ready(metrics)
            self.start = time.perf_counter()
        else:
            self.steps += 1

    def read(self):
        """Seconds per step since the last read (None before any measured step); restarts."""
        now = time.perf_counter()
        seconds = (now - self.start) / self.steps if self.steps else None
        self.start, self.steps = now, 0
        return seconds

    def restart(self) -> None:
        if self.start is not None:
            self.start, self.steps = time.perf_counter(), 0


def _check_finite(flags: list, policy: str, checkpointer: Checkpointer) -> None:
    """Reads back the steps' finiteness flags; stops or warns by policy."""
    bad = [step for step, finite in jax.device_get(flags) if not finite]
    if not bad:
        return
    if policy == "skip":
        logging.warning("non-finite loss or gradients at step(s) %s: updates skipped", bad)
        return
    latest = checkpointer.latest_step()
    kept = (
        f"checkpoint_{latest:08d} is the last good one"
        if latest is not None
        else "no checkpoint was written"
    )
    raise NonFiniteError(
        f"loss or gradients became NaN/Inf at step {bad[0]} (update not applied); "
        f"{kept}; lower LEARNING_RATE, or --set NAN_POLICY=skip to skip such steps"
    )


class NonFiniteError(PaxError):
    """NAN_POLICY=stop: a step's loss or gradients were NaN/Inf."""


def _train_summary(run: TrainingRun, step: int, metrics, timer: _StepTimer, edges: _Edges) -> dict:
    """The step's metrics with speed (step time, tokens/s, MFU), written and logged."""
    tokens_per_step = run.global_batch * run.task.model.seq_len
    flops_per_step = mfu.flops_per_step(run.task.model, run.global_batch)
    values = {k: float(v) for k, v in jax.device_get(metrics).items() if k != "finite"}
    step_time = timer.read()  # after device_get: the step has finished
    values.update(
        step_time_s=step_time,
        tokens_per_s=step_time and tokens_per_step / step_time,
        mfu=step_time and flops_per_step / step_time / edges.peak["flops"],
    )
    if edges.stream is not None:  # unreadable records skipped (BAD_RECORD_POLICY=skip)
        values["bad_records"] = edges.stream.bad_records
    edges.summaries.write("train", step, values)
    if edges.summaries.enabled:
        summaries_lib.log_train(step, run.task.train.num_train_steps, values)
    return values


def _evaluate(run: TrainingRun, place, variables) -> dict:
    """Token-weighted means over each eval split: EVAL_NUM_BATCHES fixed batches, or with
    EVAL_NUM_BATCHES=None the whole split once (Pax's reset_for_eval inputs, as its C4 runs)."""
    results = {}
    limit = run.task.train.eval_num_batches
    for name, dataset in run.eval_data.items():
        outs, index = [], 0
        while limit is None or index < limit:
            if limit is None and data.eval_exhausted(dataset, index, run.global_batch):
                break
            batch = place.batch(dataset, index)
            if limit is None and data.stream(dataset) is not None and _all_exhausted(dataset):
                break  # every process's share of the stream has ended: this batch is padding
            outs.append(place.metrics(place.eval_step(variables, batch)))
            index += 1
        outs = jax.device_get(outs)
        tokens = np.array([o["num_tokens"] for o in outs])
        results[f"eval_test_{name}"] = {
            k: float(np.sum([o[k] for o in outs] * tokens) / max(tokens.sum(), 1))
            for k in ("loss", "log_pplx", "accuracy")
        } | {"num_tokens": float(tokens.sum()), "num_batches": float(len(outs))}
    return results


def _all_exhausted(stream) -> bool:
    """Whether the stream has ended on every process (each reads its own share of a split)."""
    if jax.process_count() == 1:
        return stream.exhausted
    flags = multihost_utils.process_allgather(np.array([stream.exhausted]))
    return bool(np.all(flags))


def _write_evals(step: int, results: dict, summaries: summaries_lib.Summaries) -> None:
    for split, values in results.items():
        summaries.write(split, step, values)
        if summaries.enabled:
            summaries_lib.log_eval(step, split, values)
    summaries.flush()


def _reached_target(results: dict, target, step: int) -> bool:
    """TARGET_LOG_PPLX: Pax's EarlyStoppingFn (paxml c4.py) ends training once the eval
    log-perplexity is at or below the target; the run then ends as a finished one (exit 0)."""
    if target is None:
        return False
    split, values = next(iter(results.items()))
    if values["log_pplx"] > target:
        return False
    logging.info(
        "step %d: %s log_pplx %.4f reached TARGET_LOG_PPLX=%g; training stops here",
        step,
        split,
        values["log_pplx"],
        target,
    )
    return True


def evaluate(
    run: TrainingRun, job_dir: str, experiment_name: str, allow_env_change: bool = False
) -> dict:
    """Evaluate the newest checkpoint in job_dir on every eval split (another release or lock
    than the one that last ran it only with allow_env_change, as train)."""
    job_config.check(job_dir, _config(run, experiment_name))  # before restore: names the fields
    place = placement.for_run(run)
    checkpointer = place.checkpointer(job_dir, saving=False)
    with contextlib.closing(checkpointer):
        history = manifest.read(job_dir)
        latest = checkpointer.latest_step() if os.path.isdir(checkpointer.directory) else None
        if latest is not None:
            manifest.check_resume(job_dir, history, latest, envinfo.describe(), allow_env_change)
        latest, state = (
            checkpointer.restore_latest(place.abstract)
            if os.path.isdir(checkpointer.directory)
            else (None, None)
        )
        if state is None:
            raise UsageError(
                f"no complete checkpoint in {checkpointer.directory}; train first (--mode=train)"
            )
        _, summaries = _setup(run, job_dir, experiment_name, history, "eval", latest)
        results = _evaluate(run, place, state_lib.model_variables(place.place(state)))
        _write_evals(latest, results, summaries)
        summaries.close()
    return results
