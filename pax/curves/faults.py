"""Train a deliberately broken run, to check that the reference verdict catches real breakage.

  python -m pax.curves.faults --fault=NAME [pax.main flags: --exp=... --job_log_dir=... ...]
  python -m pax.curves.faults --list

Faults (the `references` session records one run of each beside a band; a verdict that
passed any of them would be useless):

  lr_x10          the learning rate times ten             (--set LEARNING_RATE, a config change)
  lr_div10        the learning rate a tenth               (--set LEARNING_RATE, a config change)
  no_warmup       no learning-rate warmup                 (--set LR_WARMUP_STEPS=0)
  no_final_norm   the final layer norm left out           (patched: identity instead)
  labels_shifted  every target one token further ahead    (patched: an input-pipeline
                  off-by-one; train and eval alike)
  causal_mask_dropped  attention sees the whole sequence  (patched: a mask bug that lets each
                  token see the one it predicts)

The patched ones change no config, as a numerics regression in a package would not: their
config.json is the healthy run's. Each run gets fault.json in its job directory (name,
description, how), which `compare` prints as a note. The patches go through the trainer's
module attributes at run time only; nothing in the trainer knows about them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pax.errors import PaxError, UsageError, report

FAULTS = {
    "lr_x10": "learning rate x10",
    "no_warmup": "no learning-rate warmup",
    "no_final_norm": "final layer norm dropped",
    "labels_shifted": "labels shifted by one (each target one token further ahead)",
    "causal_mask_dropped": "causal mask dropped (each position attends to the whole sequence)",
    "lr_div10": "learning rate / 10",
}
PROGRAM = "pax.curves.faults"


def _flag(argv: list[str], name: str) -> list[str]:
    values = []
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            values.append(arg.split("=", 1)[1])
        elif arg == f"--{name}" and i + 1 < len(argv):
            values.append(argv[i + 1])
    return values


def _hyper_parameter(argv: list[str], key: str):
    """KEY of the experiment --exp names, after the command line's --set overrides."""
    from pax.experiments import overrides, registry  # jax comes with them

    exp = _flag(argv, "exp")
    if not exp:
        raise SystemExit(_usage("--exp is required"))
    cls = overrides.apply(registry.get(exp[-1]), _flag(argv, "set"))
    return getattr(cls, key)


def _usage(message: str) -> int:
    return report(PROGRAM, UsageError(message))


def _patch_no_final_norm(hits: list, set_attr) -> str:
    from pax.models import base

    original = base.Sharded.norm

    def norm(self, name: str):
        if name == "final_norm":
            hits.append(name)
            return lambda x: x
        return original(self, name)

    set_attr(base.Sharded, "norm", norm)
    return "patched pax.models.base: the module named final_norm is the identity"


def _patch_labels_shifted(hits: list, set_attr) -> str:
    import jax.numpy as jnp

    from pax.train import step

    original = step.lm_loss

    def lm_loss(logits, targets, weights):
        hits.append("lm_loss")
        # Target t becomes target t+1 (the token two ahead of input t); the last position
        # has no such token and is weighted out.
        targets = jnp.concatenate([targets[:, 1:], targets[:, -1:]], axis=1)
        weights = weights.at[:, -1].set(0)
        return original(logits, targets, weights)

    set_attr(step, "lm_loss", lm_loss)
    return "patched pax.train.step.lm_loss: targets shifted one position left"


def _patch_causal_mask_dropped(hits: list, set_attr) -> str:
    import jax.numpy as jnp

    from pax.models import attention

    original = attention.attend

    def attend(q, k, v, q_positions, k_positions, *rest):
        hits.append("attend")
        # Every key at position 0 passes the causal test (query position >= key position).
        return original(q, k, v, q_positions, jnp.zeros_like(k_positions), *rest)

    set_attr(attention, "attend", attend)
    return "patched pax.models.attention.attend: every key position 0 (no causal mask)"


def arguments(fault: str, argv: list[str], hits: list, set_attr=setattr) -> tuple[list[str], str]:
    """(extra pax.main flags, how) for `fault`; patches are applied here, through set_attr
    (a test passes pytest's monkeypatch.setattr to have them undone)."""
    if fault == "lr_x10":
        flag = f"--set=LEARNING_RATE={10 * _hyper_parameter(argv, 'LEARNING_RATE'):.6g}"
        return [flag], flag
    if fault == "lr_div10":
        flag = f"--set=LEARNING_RATE={_hyper_parameter(argv, 'LEARNING_RATE') / 10:.6g}"
        return [flag], flag
    if fault == "no_warmup":
        return ["--set=LR_WARMUP_STEPS=0"], "--set=LR_WARMUP_STEPS=0"
    if fault == "no_final_norm":
        return [], _patch_no_final_norm(hits, set_attr)
    if fault == "labels_shifted":
        return [], _patch_labels_shifted(hits, set_attr)
    if fault == "causal_mask_dropped":
        return [], _patch_causal_mask_dropped(hits, set_attr)
    raise KeyError(fault)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list" in argv:
        for name, text in FAULTS.items():
            print(f"{name:<16} {text}")
        return 0
    faults = _flag(argv, "fault")
    if len(faults) != 1 or faults[0] not in FAULTS:
        return _usage(
            f"name one fault with --fault=NAME, one of {', '.join(FAULTS)} (got {faults or 'none'})"
        )
    fault = faults[0]
    rest = [
        a
        for i, a in enumerate(argv)
        if not a.startswith("--fault") and argv[i - 1 : i] != ["--fault"]
    ]
    job_dirs = _flag(rest, "job_log_dir")
    if not job_dirs:
        return _usage("--job_log_dir is required")
    hits: list = []
    extra, how = arguments(fault, rest, hits)
    from pax import main as pax_main  # after the patches' imports: same modules

    sys.argv = ["pax.curves.faults", *rest, *extra]
    code = 0
    try:
        pax_main.run()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    job_dir = Path(job_dirs[-1])
    if code == 0 and not extra and not hits:
        # The trainer no longer has what the patch replaces: the run is not broken at all.
        return report(
            PROGRAM,
            PaxError(
                f"the {fault} patch never applied ({how}); the trainer changed, "
                "update pax/curves/faults.py"
            ),
        )
    if (job_dir / "config.json").is_file():
        (job_dir / "fault.json").write_text(
            json.dumps({"name": fault, "description": FAULTS[fault], "how": how}, indent=1) + "\n"
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
