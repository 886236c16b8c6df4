"""Ahead-of-time compilation of an experiment's sharded train step for its full mesh.

`python -m pax.aot [EXP ...]` (or `./noxw -s aot`) creates as many virtual CPU
devices as the experiment's mesh needs, counts parameters abstractly (jax.eval_shape), lowers
and compiles the train step with its real shardings and reads per-device memory from the
compiled executable: a config that does not compile or does not fit is found here, not on the
accelerator. Nothing is allocated at model size.

The memory figure is XLA:CPU's plan for the partitioned step (arguments + outputs - donated
aliases + temporaries). It is an upper bound for TPU: the CPU compiler's scheduling and bf16
handling keep more temporaries alive than the TPU compiler does.

Without experiments it compiles every Pax reference experiment (pax.experiments.registry),
writes docs/aot.json and README's compile table from it, and exits 1 when one that should fit
does not (or does not compile).
"""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from pax.errors import UsageError
from pax.experiments import registry
from pax.releases import readme

HBM_BYTES = {"TPU v4": 32 * 2**30}  # per chip
TARGET = "TPU v4"
ROOT = Path(__file__).resolve().parents[1]
AOT_JSON = ROOT / "docs" / "aot.json"
START, END = "<!-- aot-table:start -->", "<!-- aot-table:end -->"
# Reference experiments whose XLA:CPU plan exceeds the target, and why that is not a failure.
EXPECTED_NOT_TO_FIT = {
    "tasks.lm.params.c4.C4Spmd16BAdam32Replicas": (
        "XLA:CPU computes bf16 matmuls in f32, so its plan keeps f32 FFN activations and "
        "residual all-reduces a TPU keeps in bf16 (README, 'Will it fit?')"
    ),
}


def _mesh_size(experiment) -> int:
    # pmap experiments: Pax ran them on a v4-8 (4 chips). A -1 (the devices left over) counts
    # as one: the smallest mesh the experiment runs on.
    ici = experiment.ICI_MESH_SHAPE or (1, 4, 1)
    dcn = experiment.DCN_MESH_SHAPE or (1,) * len(ici)
    return math.prod(max(i, 1) * d for i, d in zip(ici, dcn))


def analyze(name: str) -> dict:
    """Parameters, per-device memory and compile time of `name`'s train step (jax imported)."""
    import jax
    import jax.numpy as jnp

    from pax.parallel import pipeline, sharding
    from pax.train import loop, placement
    from pax.train import state as state_lib

    cls = registry.get(name)
    size = _mesh_size(cls)
    # The step's cost does not depend on where tokens come from: compile against synthetic data
    # (which has no end, so evaluations read a fixed number of batches).
    synthetic = {"DATA_SOURCE": "synthetic", "EVAL_NUM_BATCHES": 1}
    run = loop.prepare(type(cls.__name__, (cls,), synthetic)(), devices=jax.devices()[:size])
    place = placement.for_run(run)
    seq = run.task.model.seq_len
    keys = (("inputs", jnp.int32), ("targets", jnp.int32), ("weights", jnp.float32))
    if (
        run.strategy == placement.PMAP
    ):  # a replica per device (leading device axis), each with its slice of the batch
        state = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct((size,) + a.shape, a.dtype), place.abstract
        )
        batch = {
            k: jax.ShapeDtypeStruct((size, run.global_batch // size, seq), dtype)
            for k, dtype in keys
        }
    else:
        state = place.abstract
        spec = sharding.batch_sharding(run.mesh)
        batch = {
            k: jax.ShapeDtypeStruct((run.global_batch, seq), dtype, sharding=spec)
            for k, dtype in keys
        }
    start = time.perf_counter()
    compiled = place.train_step.lower(state, batch).compile()
    seconds = time.perf_counter() - start
    mem = compiled.memory_analysis()
    per_device = (
        mem.argument_size_in_bytes
        + mem.output_size_in_bytes
        - mem.alias_size_in_bytes
        + mem.temp_size_in_bytes
    )
    stages, microbatches = run.task.mesh.num_stages, run.task.mesh.num_microbatches
    return {
        "experiment": registry.name_of(cls),
        "params": state_lib.num_params(place.abstract, run.task.model),
        "strategy": run.strategy,
        "mesh": dict(run.mesh.shape),
        "pipeline": stages > 1
        and {
            "stages": stages,
            "microbatches": microbatches,
            "bubble_fraction": pipeline.bubble_fraction(stages, microbatches),
        },
        "devices": size,
        "global_batch": run.global_batch,
        "per_device_bytes": per_device,
        "target": TARGET,
        "fits": per_device <= HBM_BYTES[TARGET],
        "compile_s": seconds,
    }


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def render_table(rows: list[dict]) -> str:
    """Markdown for `--json` results; ends without a newline."""
    lines = [
        "| experiment | params | mesh | devices | per-device memory (XLA:CPU plan) | "
        "TPU v4 32 GiB | compile |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mesh = (
            f"{r['devices']} replicas"
            if r["strategy"] == "pmap"
            else ", ".join(f"{axis} {size}" for axis, size in r["mesh"].items())
        )
        if r.get("pipeline"):
            mesh += (
                f" ({r['pipeline']['stages']} stages × {r['pipeline']['microbatches']} "
                f"microbatches, bubble {r['pipeline']['bubble_fraction']:.1%})"
            )
        lines.append(
            f"| {r['experiment'].rsplit('.', 1)[-1]} | {r['params'] / 1e9:.2f}B | "
            f"{r['strategy']}: {mesh} | {r['devices']} | {_gib(r['per_device_bytes'])} | "
            f"{'fits' if r['fits'] else 'not by this plan'} | {r['compile_s']:.0f} s |"
        )
    return "\n".join(lines)


def recorded_table() -> str:
    return render_table(json.loads(AOT_JSON.read_text()))


def refresh_readme() -> None:
    path = ROOT / "README.md"
    text = path.read_text()
    path.write_text(readme.rewrite_text(text, recorded_table(), "README.md", START, END))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*", help="default: every Pax reference experiment")
    parser.add_argument(
        "--json",
        help="write the results here (default with no experiments: "
        "docs/aot.json, and README's table from it)",
    )
    args = parser.parse_args(argv)
    reference_set = not args.experiments
    if reference_set:
        args.experiments = registry.pax_references()
        args.json = args.json or str(AOT_JSON)
    try:
        sizes = {name: _mesh_size(registry.get(name)) for name in args.experiments}
    except UsageError as e:
        print(f"pax aot: error: {e}", file=sys.stderr)
        return 2
    if "jax" in sys.modules:
        raise RuntimeError("pax.aot must set the device count before jax is imported")
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_"
        f"device_count={max(sizes.values())}"
    )
    os.environ["JAX_PLATFORMS"] = "cpu"
    results, failed = [], []
    for name in args.experiments:
        try:
            r = analyze(name)
        except UsageError as e:
            print(f"pax aot: {name}: {e}", file=sys.stderr)
            failed.append(name)
            continue
        results.append(r)
        stages = (
            f", {r['pipeline']['stages']} stages x {r['pipeline']['microbatches']} "
            f"microbatches (bubble {r['pipeline']['bubble_fraction']:.1%})"
            if r["pipeline"]
            else ""
        )
        print(
            f"{r['experiment']}: {r['params'] / 1e9:.2f}B params, {r['strategy']} over "
            f"{r['mesh']}{stages}, "
            f"{r['per_device_bytes'] / 2**30:.2f} GiB per device "
            f"({'fits' if r['fits'] else 'does NOT fit'} {r['target']}'s 32 GiB), "
            f"compiled in {r['compile_s']:.0f}s",
            flush=True,
        )
        if not r["fits"]:
            why = EXPECTED_NOT_TO_FIT.get(r["experiment"])
            if why:
                print(f"  expected: {why}", flush=True)
            else:
                failed.append(name)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    if reference_set and Path(args.json) == AOT_JSON:
        refresh_readme()
    if failed:
        print(f"pax aot: did not compile or does not fit: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
