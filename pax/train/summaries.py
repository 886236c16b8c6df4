"""Where metrics go: TensorBoard event files, metrics.jsonl and one readable log line."""

import json
import os

from absl import logging
from tensorboardX import SummaryWriter


class Summaries:
    """Writes under job_dir; only the first process writes (the others get a no-op)."""

    def __init__(self, job_dir: str, enabled: bool = True):
        self.job_dir, self.enabled = job_dir, enabled
        self._writers = {}
        self._jsonl = open(os.path.join(job_dir, "metrics.jsonl"), "a") if enabled else None

    def _writer(self, split: str) -> SummaryWriter:
        if split not in self._writers:
            self._writers[split] = SummaryWriter(os.path.join(self.job_dir, "summaries", split))
        return self._writers[split]

    def write(self, split: str, step: int, scalars: dict) -> None:
        """split: 'train' or 'eval_test_<name>', as in Pax's job directory."""
        if not self.enabled:
            return
        writer = self._writer(split)
        for name, value in scalars.items():
            if value is not None:
                writer.add_scalar(name, value, step)
        self._jsonl.write(json.dumps({"split": split, "step": step, **scalars}) + "\n")

    def flush(self) -> None:
        if not self.enabled:
            return
        self._jsonl.flush()
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        self.flush()
        self._jsonl.close()
        for writer in self._writers.values():
            writer.close()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
        if seconds >= 3600
        else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def log_train(step: int, total: int, m: dict) -> None:
    if m["step_time_s"] is None:
        speed = "compiled"
    else:
        speed = (
            f"{m['tokens_per_s']:.0f} tokens/s  mfu {100 * m['mfu']:.1f}%  "
            f"ETA {_duration((total - step) * m['step_time_s'])}"
        )
    logging.info(
        "step %d/%d  loss %.4f  grad_norm %.3f  lr %.2e  %s",
        step,
        total,
        m["loss"],
        m["grad_norm"],
        m["learning_rate"],
        speed,
    )


def log_eval(step: int, split: str, m: dict) -> None:
    logging.info("step %d  %s  loss %.4f  accuracy %.3f", step, split, m["loss"], m["accuracy"])
