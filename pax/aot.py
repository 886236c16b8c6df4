"""Ahead-of-time compilation of an experiment's train step for a TPU slice, with no TPU.

`python -m pax.aot [EXP ...]` (or `./noxw -s aot`, which runs it in the release's tpu env) counts
parameters abstractly (jax.eval_shape), lowers the train step with its real shardings for the
slice's devices and reads per-chip memory from the compiled executable: a config that does not
compile or does not fit is found here, not on the accelerator. Nothing is allocated at model size.

Where libtpu is importable (the tpu env) the plan is the TPU compiler's own, for the slice's
topology (`jax.experimental.topologies.get_topology_desc`, as MaxText's train_compile does): the
executable a TPU host would run, compiled on this CPU. A config that does not fit fails that
compile with the compiler's own figure, which is recorded. Where jax's CUDA plugin is (the gpu
env), `--gpu h100` plans for as many H100s as the mesh has, 8 a node, with the CUDA compiler and
the GPU image's XLA flags (pax.parallel.gpu_targets: XLA's description of each GPU); it refuses
nothing, so its plan is held against the GPU's memory. Elsewhere (the cpu env, `--cpu`) XLA:CPU
plans it on virtual CPU devices, an upper bound: the CPU compiler computes bf16 matmuls in f32
and keeps more temporaries alive than the TPU compiler does.

Per chip is arguments + outputs - donated aliases + temporaries. The step is traced for the
target's platform (pax.models.platform), so `ATTENTION_KERNEL` and `CPU_KERNELS` left at `auto`
resolve as there (splash attention on a TPU, the capped softmax, no XLA:CPU-tuned forms), not
as this CPU host would.

Without experiments it plans every Pax reference experiment on the TPU generation Pax ran it on
(v4) and on v5e with as many chips, plus the one-chip v5e recipes (ONE_CHIP), and the GPU rows
(GPU_PLANS), each platform where its own compiler is here (the other's rows stay), writes
docs/aot.json and docs/parallelism.md's compile table from it, and exits 1 when a plan that should fit does
not (or does not compile).
"""

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import sys
import time
from pathlib import Path

from pax.errors import ExitingArgumentParser, UsageError, report
from pax.experiments import overrides, registry
from pax.launch import plans, tpu_slices, xla_flags
from pax.parallel import gpu_targets
from pax.paths import ROOT
from pax.releases import readme

GIB = 2**30
AOT_JSON = ROOT / "docs" / "aot.json"
START, END = "<!-- aot-table:start -->", "<!-- aot-table:end -->"


@dataclasses.dataclass(frozen=True)
class Generation:
    """What the TPU compiler needs of a generation besides its slices' names and shapes
    (pax.launch.tpu_slices)."""

    label: str
    hbm_bytes: int  # per chip
    chip_config: str  # v4's two TensorCores act as one device ("megacore")
    max_chips: int  # the largest slice planned here
    wrap: dict  # chips -> wrap-around links per dimension, where the slice has them


# Keyed by the chip's name (tpu_slices.Generation.chip).
GENERATIONS = {
    "v4": Generation("TPU v4", 32 * GIB, "megacore", 128, {64: (True,) * 3, 128: (True,) * 3}),
    "v5e": Generation(
        "TPU v5e", 16 * GIB, "default", 256, {128: (False, True, False), 256: (True, True, False)}
    ),
}
PAX_GENERATION = "v4"  # where Pax ran its reference experiments (v4-8, the 16B on a v4-64)


@dataclasses.dataclass(frozen=True)
class Slice:
    generation: str  # a GENERATIONS key
    chips: int

    @property
    def gen(self) -> Generation:
        return GENERATIONS[self.generation]

    @property
    def cloud(self) -> tpu_slices.Slice:
        return tpu_slices.parse(self.generation).sized(self.chips)

    @property
    def name(self) -> str:
        """The canonical name, Cloud TPU's accelerator type: v4-64 (TensorCores), v5litepod-32."""
        return self.cloud.name

    @property
    def topology(self) -> str:
        return f"{self.generation}:{self.cloud.topology}"

    @property
    def label(self) -> str:
        return self.gen.label

    @property
    def hbm_bytes(self) -> int:
        return self.gen.hbm_bytes

    def devices(self):
        from jax.experimental.topologies import get_topology_desc

        return get_topology_desc(
            platform="tpu",
            topology_name=self.topology,
            chip_config_name=self.gen.chip_config,
            chips_per_host_bounds=(1, 1, 1) if self.chips == 1 else (2, 2, 1),
            wrap=self.gen.wrap.get(self.chips, (False, False, False)),
        ).devices


@dataclasses.dataclass(frozen=True)
class GpuNodes:
    """`chips` GPUs of one kind, 8 a node: a GPU plan's target, as Slice is a TPU plan's."""

    target: gpu_targets.GpuTarget
    chips: int

    @property
    def name(self) -> str:
        return f"{gpu_targets.nodes(self.chips)}×{min(self.chips, 8)} {self.target.name.upper()}"

    @property
    def topology(self) -> str:
        return f"cuda:{gpu_targets.topology(self.chips)}"

    @property
    def label(self) -> str:
        return self.target.device

    @property
    def hbm_bytes(self) -> int:
        return self.target.memory_bytes

    def devices(self):
        return gpu_targets.devices(self.target, self.chips)


def platform_of(generation: str) -> str:
    """tpu for a TPU generation, gpu for a GPU (a pax.parallel.gpu_targets name)."""
    return "tpu" if generation in GENERATIONS else "gpu"


def slice_for(generation: str, chips: int) -> Slice | GpuNodes:
    if platform_of(generation) == "gpu":
        gpu_targets.topology(chips)  # GPUs that fill their nodes, or UsageError
        return GpuNodes(gpu_targets.get(generation), chips)
    gen = GENERATIONS.get(generation)
    if gen is None:
        raise UsageError(f"unknown TPU generation {generation!r}; one of {', '.join(GENERATIONS)}")
    if chips > gen.max_chips or (chips != 1 and (chips < 4 or chips & (chips - 1))):
        raise UsageError(
            f"no {gen.label} slice of {chips} chips here; slices of 1 chip or a power of two "
            f"from 4 to {gen.max_chips} (change ICI_MESH_SHAPE)"
        )
    return Slice(generation, chips)


def tpu_option(text: str) -> tpu_slices.Slice:
    """--tpu's value: a generation or a slice in any of pax.launch.tpu_slices' spellings, of a
    generation planned here."""
    try:
        found = tpu_slices.parse(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if found.generation.chip not in GENERATIONS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is a TPU {found.generation.chip}; plans are made for TPU "
            f"{', '.join(GENERATIONS)} here"
        )
    return found


@dataclasses.dataclass(frozen=True)
class Plan:
    """One row: an experiment, its --set overrides, the TPU generation it is planned for."""

    experiment: str
    generation: str
    sets: tuple = ()
    # Why a plan is not expected to fit (None: expected to fit; a miss then fails the command).
    expect_not_to_fit: str | None = None
    chips: int | None = None  # --tpu named a slice, which the mesh must fill


ONE_CHIP = ("ICI_MESH_SHAPE=(1,1,1)",)
C4_1B = "tasks.lm.params.c4.C4Spmd1BAdam4Replicas"
C4_16B = "tasks.lm.params.c4.C4Spmd16BAdam32Replicas"
# Pax's 1B config on one 16 GiB v5e chip: whole, it does not fit even at batch 4 (the chip
# refused it too); 6 of its 13 layers train at batch 16 with full remat (measured on a chip), and
# so does saving the matmuls (dots_with_no_batch_dims_saveable, measured too).
ONE_CHIP_PLANS = (
    Plan(C4_1B, "v5e", ONE_CHIP + ("PERCORE_BATCH_SIZE=4",), "13 layers × 2560 on one chip"),
    Plan(C4_1B, "v5e", ONE_CHIP + ("NUM_LAYERS=6", "PERCORE_BATCH_SIZE=16")),
    Plan(
        C4_1B,
        "v5e",
        ONE_CHIP
        + (
            "NUM_LAYERS=6",
            "PERCORE_BATCH_SIZE=16",
            "REMAT_POLICY=dots_with_no_batch_dims_saveable",
        ),
    ),
    Plan(
        C4_1B,
        "v5e",
        ONE_CHIP
        + ("NUM_LAYERS=6", "PERCORE_BATCH_SIZE=8", "REMAT_POLICY=dots_with_no_batch_dims_saveable"),
    ),
)
# Reference experiments on v5e with Pax's chip count, where its 16 GiB are too few.
V5E_TOO_SMALL = {
    C4_16B: "16 GiB chips: 32 of them do not hold the 16B run's state and activations",
}


# Pax's references on H100s (80 GB): the 1B on one node, its data axis over the node's 8 GPUs;
# the 16B on the 32 GPUs of its mesh, 4 nodes.
GPU_PLANS = (
    Plan(C4_1B, "h100", ("ICI_MESH_SHAPE=(1,8,1)",)),
    Plan(C4_16B, "h100"),
)


def reference_plans() -> list[Plan]:
    plans = []
    for name in registry.pax_references():
        plans.append(Plan(name, PAX_GENERATION))
        plans.append(Plan(name, "v5e", (), V5E_TOO_SMALL.get(name)))
    return plans + list(ONE_CHIP_PLANS)


def _mesh_size(experiment) -> int:
    # pmap experiments: Pax ran them on a v4-8 (4 chips). A -1 (the devices left over) counts
    # as one: the smallest mesh the experiment runs on.
    ici = experiment.ICI_MESH_SHAPE or (1, 4, 1)
    dcn = experiment.DCN_MESH_SHAPE or (1,) * len(ici)
    return math.prod(max(i, 1) * d for i, d in zip(ici, dcn))


def _experiment(plan: Plan):
    return overrides.apply(registry.get(plan.experiment), list(plan.sets))


def cuda_plugin_version() -> str | None:
    """`jax-cudaN-plugin VERSION` where jax's CUDA plugin is installed, else None."""
    plugin = gpu_targets.cuda_plugin()
    return f"{plugin.package} {importlib.metadata.version(plugin.package)}" if plugin else None


def compiler(platform: str, native: bool) -> str:
    """Who plans: the target's own compiler (native), or XLA:CPU on virtual CPU devices."""
    if not native:
        return "XLA:CPU"
    if platform == "gpu":
        return f"CUDA ({cuda_plugin_version()})"
    return f"TPU (libtpu {libtpu_version()})"


def libtpu_version() -> str | None:
    """libtpu's version where it is importable (without importing it), else None."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    try:
        return importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


# The TPU compiler's refusals: "the total memory required for HLO temporaries (22.87G) exceeds
# available HBM (15.75G)", or "Used 40.1G of 31.25G hbm" (G: GiB).
_OOM = (
    re.compile(
        r"required for HLO temporaries \(([\d.]+)([KMGT]?)\) exceeds available HBM "
        r"\(([\d.]+)([KMGT]?)\)"
    ),
    re.compile(r"Used ([\d.]+)([KMGT]?) of ([\d.]+)([KMGT]?) hbm", re.IGNORECASE),
)
_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_out_of_memory(message: str) -> tuple[int, int] | None:
    """(needed, available) bytes from the TPU compiler's out-of-HBM error, else None."""
    for pattern in _OOM:
        m = pattern.search(message)
        if m:
            used, u1, cap, u2 = m.groups()
            return int(float(used) * _UNIT[u1.upper()]), int(float(cap) * _UNIT[u2.upper()])
    return None


def analyze(plan: Plan, native: bool) -> dict:
    """Parameters, per-chip memory and compile time of a plan's train step (jax imported).

    native: compile with the target's own compiler (the TPU compiler for the slice's topology,
    the CUDA compiler for the GPUs); else with XLA:CPU on virtual CPU devices (they must exist:
    main sets their count before jax is imported).
    """
    import jax

    from pax.models import platform as models_platform
    from pax.parallel import pipeline
    from pax.train import placement
    from pax.train import state as state_lib
    from pax.train.instantiate import instantiate

    cls = _experiment(plan)
    size = _mesh_size(cls)
    target = slice_for(plan.generation, size)
    platform = platform_of(plan.generation)
    tpu = native and platform == "tpu"
    devices = target.devices() if native else jax.devices()[:size]
    on_target = _as_on_target(cls, tpu, gpu=native and platform == "gpu")
    with models_platform.target(devices):
        run = instantiate(on_target(), devices=devices)
        place = placement.for_run(run)
        state, batch = _abstract_inputs(run, place, size)
        start = time.perf_counter()
        per_device, temp, available, error = _compiled_memory(place, state, batch, tpu)
        seconds = time.perf_counter() - start
    stages, microbatches = run.task.mesh.num_stages, run.task.mesh.num_microbatches
    return {
        "experiment": registry.name_of(registry.get(plan.experiment)),
        "sets": list(plan.sets),
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
        "attention": run.task.model.attention_kernel,
        "remat": run.task.model.remat_policy,
        "target": {
            "generation": target.label,
            "slice": target.name,
            "topology": target.topology if native else None,
            "hbm_bytes": target.hbm_bytes,
        },
        "platform": platform,
        "compiler": compiler(platform, native),
        "per_device_bytes": per_device,
        "temp_bytes": temp,
        # The TPU compiler refuses a step whose live memory exceeds the HBM it may use: its
        # acceptance is the verdict. The plan's sum overstates the peak (temporaries and the
        # donated state overlap): a 6-layer 1B step at batch 16 with the dots policy, 18.41 GiB
        # by this sum, compiled and trained on one 16 GiB v5e chip (docs/bench.json). XLA:CPU
        # and the CUDA compiler refuse nothing, so their sum is held against the chip's memory.
        "fits": error is None and (tpu or per_device <= target.hbm_bytes),
        "compile_error": error,
        "hbm_available_bytes": available,
        "compile_s": seconds,
    }


def _as_on_target(cls: type, tpu: bool, gpu: bool = False) -> type:
    """The experiment on synthetic data, with its `auto` kernels resolved as the target would."""
    from pax.models import splash

    # The step's cost does not depend on where tokens come from: compile against synthetic data
    # (which has no end, so evaluations read a fixed number of batches).
    fixed = {"DATA_SOURCE": "synthetic", "EVAL_NUM_BATCHES": 1}
    # Traced for the target (pax.models.platform), `auto` resolves as there; the kernel is
    # named here so that the plan records it.
    if tpu or gpu:
        target = "tpu" if tpu else "gpu"
        fixed["ATTENTION_KERNEL"] = splash.resolve(cls.ATTENTION_KERNEL, cls.SEQ_LEN, target)
    return type(cls.__name__, (cls,), fixed)


def _abstract_inputs(run, place, size: int) -> tuple:
    """The train step's (state, batch) as shapes, laid out as the run's strategy places them."""
    import jax
    import jax.numpy as jnp

    from pax.parallel import sharding
    from pax.train import placement

    seq = run.task.model.seq_len
    keys = (("inputs", jnp.int32), ("targets", jnp.int32), ("weights", jnp.float32))
    if run.strategy == placement.PMAP:
        # a replica per device (leading device axis), each with its slice of the batch
        state = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct((size,) + a.shape, a.dtype), place.abstract
        )
        shape = (size, run.global_batch // size, seq)
        return state, {k: jax.ShapeDtypeStruct(shape, dtype) for k, dtype in keys}
    spec = sharding.batch_sharding(run.mesh)
    shape = (run.global_batch, seq)
    return place.abstract, {
        k: jax.ShapeDtypeStruct(shape, dtype, sharding=spec) for k, dtype in keys
    }


def _compiled_memory(place, state, batch, tpu: bool) -> tuple:
    """(per-chip bytes, temporaries' bytes, usable HBM, compile error) of the compiled step;
    the last two are None unless the TPU compiler refused it for want of HBM."""
    try:
        compiled = place.train_step.lower(state, batch).compile()
    except Exception as e:  # the TPU compiler refuses a step that does not fit its HBM
        found = tpu and parse_out_of_memory(str(e))
        if not found:
            raise
        per_device, available = found
        # what the compiler names is its temporaries alone
        return per_device, per_device, available, str(e).splitlines()[0][:300]
    mem = compiled.memory_analysis()
    per_device = (
        mem.argument_size_in_bytes
        + mem.output_size_in_bytes
        - mem.alias_size_in_bytes
        + mem.temp_size_in_bytes
    )
    return per_device, mem.temp_size_in_bytes, None, None


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def count(n: int) -> str:
    """A parameter count in the largest unit that shows two figures of it: 16.51B, 0.16B,
    3.22M, 99."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size / 10:
            return f"{n / size:.2f}{unit}"
    return str(n)


def _name(r: dict) -> str:
    name = r["experiment"].rsplit(".", 1)[-1]
    return name + "".join(f" `{s}`" for s in r.get("sets", ()))


def render_table(rows: list[dict]) -> str:
    """Markdown for `--json` results; ends without a newline."""
    lines = [
        "| experiment | params | mesh | slice or nodes (chips) | planned by | attention | "
        "per-chip memory | HBM per chip | fits | compile |",
        "|---|---|---|---|---|---|---|---|---|---|",
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
        t = r["target"]
        where = f"{_slice(r)} ({r['devices']})"
        if t.get("topology"):
            where += f", `{t['topology']}`"
        native = r["compiler"] != "XLA:CPU"
        memory = _gib(r["per_device_bytes"])
        if r.get("compile_error"):
            memory = f"temporaries alone {memory} > {_gib(r['hbm_available_bytes'])} usable"
        fits = "fits" if r["fits"] else ("no" if native else "not by this plan")
        lines.append(
            f"| {_name(r)} | {count(r['params'])} | {r['strategy']}: {mesh} | {where} | "
            f"{r['compiler'] if native else 'XLA:CPU (upper bound)'} | {r.get('attention', '')} | "
            f"{memory} | {_gib(t['hbm_bytes'])} | {fits} | {r['compile_s']:.0f} s |"
        )
    return "\n".join(lines)


def recorded_table() -> str:
    return render_table(json.loads(AOT_JSON.read_text()))


TABLE_PAGE = ROOT / "docs" / "parallelism.md"  # the page holding the compile table


def refresh_readme() -> None:
    text = TABLE_PAGE.read_text()
    name = str(TABLE_PAGE.relative_to(ROOT))
    TABLE_PAGE.write_text(readme.rewrite_text(text, recorded_table(), name, START, END))


def _report(r: dict) -> str:
    stages = (
        f", {r['pipeline']['stages']} stages x {r['pipeline']['microbatches']} "
        f"microbatches (bubble {r['pipeline']['bubble_fraction']:.1%})"
        if r["pipeline"]
        else ""
    )
    t = r["target"]
    where = f"{_slice(r)} ({t['topology']})" if t["topology"] else _slice(r)
    verdict = "fits" if r["fits"] else "does NOT fit"
    sets = "".join(f" --set {s}" for s in r["sets"])
    return (
        f"{r['experiment']}{sets}: {count(r['params'])} params, {r['strategy']} over "
        f"{r['mesh']}{stages}, {r['attention']} attention; {r['compiler']} plan for {where}: "
        f"{r['per_device_bytes'] / GIB:.2f} GiB per chip ({verdict} {t['hbm_bytes'] / GIB:.0f} "
        f"GiB), compiled in {r['compile_s']:.0f}s"
    )


def _slice(record: dict) -> str:
    """The slice a record planned for, a TPU's under its canonical name however it was recorded."""
    return plans.slice_name(record) or record["target"]["slice"]


def _parser() -> argparse.ArgumentParser:
    parser = ExitingArgumentParser(prog="python -m pax.aot", description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*", help="default: every Pax reference experiment")
    parser.add_argument(
        "--tpu",
        action="append",
        type=tpu_option,
        metavar="TPU",
        help="TPU to plan for (repeatable; default: v4 and v5e): a generation (v5e, v5litepod, "
        "tpu-v5-lite-podslice), whose slice has as many chips as the experiment's mesh, or a "
        "slice the mesh fills (v5litepod-32, v5e-32), spelled as `./noxw -s cluster` takes them",
    )
    parser.add_argument(
        "--gpu",
        action="append",
        choices=gpu_targets.names(),
        help="GPU to plan for with the CUDA compiler (repeatable): as many as the experiment's "
        "mesh, 8 a node",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a hyper-parameter, as pax.main's --set",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="plan with XLA:CPU on virtual CPU devices (an upper bound) even where libtpu or the "
        "CUDA plugin is here",
    )
    parser.add_argument(
        "--json",
        help="write the results here (default with no experiments: "
        "docs/aot.json, and docs/parallelism.md's table from it)",
    )
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    reference_set = not args.experiments
    native = native_compilers(args.cpu)
    try:
        plans = _plans(args, native)
        sizes = []
        for plan in plans:
            sizes.append(_mesh_size(_experiment(plan)))
            target = slice_for(plan.generation, sizes[-1])
            if plan.chips not in (None, sizes[-1]):
                asked = tpu_slices.parse(plan.generation).sized(plan.chips).name
                raise UsageError(
                    f"--tpu {asked} has {plan.chips} chips; {plan.experiment.rsplit('.', 1)[-1]}'s "
                    f"mesh has {sizes[-1]}: use --tpu {target.name} (or --tpu {plan.generation}, "
                    "the slice the mesh fills), or change ICI_MESH_SHAPE"
                )
    except UsageError as e:
        return report("pax aot", e)
    if "jax" in sys.modules:
        raise RuntimeError("pax.aot must set the device count before jax is imported")
    platforms = {platform_of(p.generation) for p in plans}
    _say_fallbacks(native, platforms, args.cpu)
    _compile_on_this_host(max(sizes), gpu=native["gpu"] and "gpu" in platforms)
    results, failed = _plan_all(plans, native)
    if args.json:
        if reference_set and Path(args.json).is_file():  # the other platforms' rows stay
            kept = json.loads(Path(args.json).read_text())
            results = [r for r in kept if r.get("platform", "tpu") not in platforms] + results
            results.sort(key=lambda r: r.get("platform", "tpu") == "gpu")  # TPU rows first
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    if reference_set and Path(args.json) == AOT_JSON:
        refresh_readme()
    if failed:
        print(f"pax aot: did not compile or does not fit: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def native_compilers(cpu: bool) -> dict[str, bool]:
    """platform -> whether its own compiler is here (libtpu; jax's CUDA plugin)."""
    return {
        "tpu": not cpu and libtpu_version() is not None,
        "gpu": not cpu and cuda_plugin_version() is not None,
    }


def _plans(args, native: dict[str, bool]) -> list[Plan]:
    """The plans the command line asks for. Without experiments, the reference rows of each
    platform whose own compiler is here (of both where neither is, or with --cpu)."""
    if not args.experiments:
        if args.set or args.tpu or args.gpu:
            raise UsageError("--set, --tpu and --gpu need experiments; without, the reference plan")
        args.json = args.json or str(AOT_JSON)
        here = [p for p, ok in native.items() if ok] or list(native)
        plans = reference_plans() + list(GPU_PLANS)
        return [p for p in plans if platform_of(p.generation) in here]
    tpus = [(s.generation.chip, s.chips) for s in args.tpu or []]
    targets = tpus + [(gpu, None) for gpu in args.gpu or []] or [("v4", None), ("v5e", None)]
    return [
        Plan(name, target, tuple(args.set), chips=chips)
        for name in args.experiments
        for target, chips in targets
    ]


def _say_fallbacks(native: dict[str, bool], platforms: set[str], cpu: bool) -> None:
    """One line for each platform planned whose own compiler is not here: XLA:CPU plans it."""
    where = {
        "tpu": "libtpu is not importable here: XLA:CPU plans TPU targets on virtual CPU devices "
        "(an upper bound); the release's tpu env has the TPU compiler (./noxw -s aot)",
        "gpu": "jax's CUDA plugin is not importable here: XLA:CPU plans GPU targets on virtual "
        "CPU devices (an upper bound); the release's gpu env has the CUDA compiler "
        "(./noxw -s aot -- gpu)",
    }
    for platform in sorted(platforms):
        if not native[platform] and not cpu:
            print(f"pax aot: {where[platform]}", file=sys.stderr)


def _compile_on_this_host(devices: int, gpu: bool = False) -> None:
    """Set up, before jax is imported, a CPU backend with `devices` virtual devices (and, with
    gpu, jax's CUDA plugin compiling for GPUs it has not got, with the GPU image's XLA flags)."""
    # Virtual CPU devices for XLA:CPU's plans; a TPU plan's devices are the topology's, and
    # this host's backend stays the CPU (no TPU is opened, whether or not one is attached).
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    )
    os.environ["JAX_PLATFORMS"] = "cpu"
    # libtpu takes a machine-wide lockfile when it loads, meant for the process that drives the
    # chips; compiling for a topology opens none, so plans may run beside each other (and
    # beside a training run on a TPU host).
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if gpu:
        os.environ["XLA_FLAGS"] = xla_flags.with_user_flags(os.environ["XLA_FLAGS"])
        gpu_targets.compile_only()
    _one_worker_without_chips()


def _one_worker_without_chips() -> None:
    """On a host with no TPU chip, describe it to libtpu as one worker of a one-chip slice.

    libtpu, loading, asks the environment for the slice this host belongs to and, where nothing
    says it (no metadata server either), logs an E-level INVALID_ARGUMENT and a host-bounds
    warning, then goes on. Compiling for a named topology reads neither: the compiled programs
    are byte for byte the same with and without these variables. A TPU host keeps its own.
    """
    from jax._src import hardware_utils  # how jax itself finds attached chips (reads sysfs)

    if hardware_utils.num_available_tpu_chips_and_device_id()[0] == 0:
        os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
        os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-1")


def _plan_all(plans: list[Plan], native: dict[str, bool]) -> tuple[list[dict], list[str]]:
    """Each plan's result, printed as it comes, and the labels of those that failed: did not
    compile, or do not fit where the target's own compiler says they should."""
    results, failed = [], []
    for plan in plans:
        label = " ".join([plan.experiment, *plan.sets, f"on {plan.generation}"])
        try:
            r = analyze(plan, native=native[platform_of(plan.generation)])
        except UsageError as e:
            report("pax aot", f"{label}: {e}")
            failed.append(label)
            continue
        results.append(r)
        print(_report(r), flush=True)
        if r["fits"]:
            continue
        if r["compile_error"]:
            print(f"  the TPU compiler: {r['compile_error']}", flush=True)
        if plan.expect_not_to_fit:
            print(f"  expected: {plan.expect_not_to_fit}", flush=True)
        elif r["compiler"] != "XLA:CPU":
            failed.append(label)
        else:
            print(
                "  XLA:CPU's plan is an upper bound; the target's own compiler decides", flush=True
            )
    return results, failed


if __name__ == "__main__":
    sys.exit(main())
