"""A numerics regression to bisect: a toy trainer whose optimizer comes from a package.

`toytrain.py JOB_DIR SEED` trains a linear model on noisy synthetic data by SGD with
momentum, taking the update rule from the package `toyopt` as the real trainer takes Adam
from optax, and writes a job directory as pax.main does (metrics.jsonl with one batch's train
loss every 10 steps and the eval loss every 50, config.json, manifest.json naming the
installed toyopt), so `python -m pax.curves compare` judges it like a real run.

TOYOPT's releases: 1.0 and 1.1 (a refactor, the same math) are healthy; 1.2 plants the
regression and 2.0 keeps it: the momentum buffer became an exponential moving average
(0.9 m + 0.1 g instead of 0.9 m + g), a real-world kind of change (a "dampening" default)
that shrinks every step tenfold and slows the curve without breaking anything loudly.
"""

from __future__ import annotations

import textwrap

HEALTHY = textwrap.dedent("""\
    def update(params, grads, moments, lr):
        moments = [0.9 * m + g for m, g in zip(moments, grads)]
        return [p - lr * m for p, m in zip(params, moments)], moments
""")
REFACTORED = textwrap.dedent("""\
    MOMENTUM = 0.9

    def _accumulate(m, g):
        return MOMENTUM * m + g

    def update(params, grads, moments, lr):
        moments = list(map(_accumulate, moments, grads))
        return [p - lr * m for p, m in zip(params, moments)], moments
""")
PLANTED = textwrap.dedent("""\
    MOMENTUM = 0.9

    def update(params, grads, moments, lr):
        # an EMA of the gradients: "dampening" by (1 - momentum)
        moments = [MOMENTUM * m + (1 - MOMENTUM) * g for m, g in zip(moments, grads)]
        return [p - lr * m for p, m in zip(params, moments)], moments
""")
TOYOPT = {"1.0": HEALTHY, "1.1": REFACTORED, "1.2": PLANTED, "2.0": PLANTED}
FILLERS = [f"toy{c}" for c in "abcdefgh"]  # changed between the locks, numerically inert

TRAINER = textwrap.dedent("""\
    import hashlib, json, math, random, sys
    from pathlib import Path

    import toyopt

    STEPS, BATCH, LR, DIM = 150, 8, 0.005, 4
    TRUE_W = [1.5, -2.0, 0.7, 3.0]
    job, seed = Path(sys.argv[1]), int(sys.argv[2])


    def sample(rng):
        x = [rng.gauss(0, 1) for _ in range(DIM)]
        y = sum(w * v for w, v in zip(TRUE_W, x)) + 0.5 * math.sin(3 * x[0]) + rng.gauss(0, 0.3)
        return x, y


    def loss_and_grads(params, batch):
        *w, b = params
        loss, grads = 0.0, [0.0] * (DIM + 1)
        for x, y in batch:
            err = sum(wi * xi for wi, xi in zip(w, x)) + b - y
            loss += err * err / len(batch)
            for i, xi in enumerate(x):
                grads[i] += 2 * err * xi / len(batch)
            grads[DIM] += 2 * err / len(batch)
        return loss, grads


    rng = random.Random(seed)
    eval_rng = random.Random(0)  # one fixed eval set for every seed
    eval_set = [sample(eval_rng) for _ in range(256)]
    params = [rng.gauss(0, 0.1) for _ in range(DIM + 1)]
    moments = [0.0] * (DIM + 1)
    job.mkdir(parents=True)
    rows = []
    for step in range(1, STEPS + 1):
        loss, grads = loss_and_grads(params, [sample(rng) for _ in range(BATCH)])
        params, moments = toyopt.update(params, grads, moments, LR)
        if step % 10 == 0:
            rows.append({"split": "train", "step": step, "loss": loss, "log_pplx": loss})
        if step % 50 == 0:
            e = loss_and_grads(params, eval_set)[0]
            rows.append({"split": "eval_test_toy", "step": step, "loss": e, "log_pplx": e})
    (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
    config = {
        "experiment": "tests.bisect.Toy",
        "task": {"train": {"num_train_steps": STEPS, "seed": seed}, "optimizer": {"lr": LR}},
    }
    (job / "config.json").write_text(json.dumps(config))
    env = f"toyopt=={toyopt.VERSION}"
    manifest = {"release": "toy", "lock_sha256": hashlib.sha256(env.encode()).hexdigest(),
                "devices": {"platform": "cpu"}}
    (job / "manifest.json").write_text(json.dumps(manifest))
""")
