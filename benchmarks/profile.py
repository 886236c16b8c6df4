"""`./noxw -s bench -- --profile`: where a step's time goes, in the project's model and in the
independent baseline, op by op.

Each program's step runs under jax.profiler; every traced XLA op is matched to its instruction
in the compiled HLO and charged to the model code that produced it: the op_name XLA keeps in
the instruction's metadata (for a fusion, its root's), with the pass (forward, backward, other:
the loss's reduction, the optimizer) and its kind (matmul, reduce, copy/transpose, ...: for a
fusion, the first of those it contains) beside it. The per-kind summary compares the two
programs; the per-source tables say where to look.

On a multi-core CPU ops overlap and the tables add up to more than the step; for CPU time per
op, pin the process to one core: `taskset -c 0 ./noxw -s bench -- --profile`.
"""

import collections
import functools
import glob
import os
import re
import tempfile
from typing import NamedTuple

import jax
from jax.profiler import ProfileData

# Module-instance suffixes (Block_3, layer_0, Dense_2) and call wrappers that say nothing about
# which code an op came from (jax 0.12 names a scan's body eval_jaxpr).
_INSTANCE = re.compile(r"(?<=[A-Za-z])_\d+(?=[/.]|$)")
_WRAPPERS = re.compile(
    r"(?<![^/])(closed_call|checkpoint|rematted_computation|while|body|eval_jaxpr)/"
)
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*?) ([a-z][\w\-]*)\(")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.\-]+) .*\{$")
_CALLS = re.compile(r"calls=%([\w.\-]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CONTROL_FLOW = ("while", "call", "conditional")
_KINDS = (  # the first that a fusion contains names it
    ("matmul", {"dot", "convolution"}),
    ("reduce", {"reduce", "reduce-window"}),
    ("gather/scatter", {"gather", "scatter", "dynamic-slice", "dynamic-update-slice"}),
    ("copy/transpose", {"copy", "transpose"}),
    ("concatenate/pad", {"concatenate", "pad"}),  # not slice: most slice a stacked parameter
)


def _kind(opcodes: set) -> str:
    """What an instruction, or a fusion of `opcodes`, mostly does."""
    for kind, members in _KINDS:
        if opcodes & members:
            return kind
    return "elementwise"


def _instructions(hlo: str) -> dict:
    """{instruction name: (kind, op_name, shape)} for every instruction of the compiled HLO; a
    fusion is told by what it fuses and named by its root's op_name."""
    # computation name -> [(instruction, shape, opcode, op_name, calls)]
    computations = collections.defaultdict(list)
    roots = {}
    computation = None
    for line in hlo.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            computation = header.group(1)
            continue
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        op_name, calls = _OP_NAME.search(line), _CALLS.search(line)
        entry = (*match.groups(), op_name.group(1) if op_name else "", calls and calls.group(1))
        computations[computation].append(entry)
        if line.lstrip().startswith("ROOT"):
            roots[computation] = entry

    @functools.cache
    def fused(computation) -> frozenset:
        ops = set()
        for _, _, opcode, _, calls in computations[computation]:
            ops.add(opcode)
            if calls in computations:
                ops |= fused(calls)
        return frozenset(ops)

    described = {}
    for entries in computations.values():
        for name, shape, opcode, op_name, calls in entries:
            if opcode in _CONTROL_FLOW:
                continue  # its body's ops are traced, and charged, one by one
            if opcode == "fusion" and calls in roots:
                # Passes that add instructions (a convert, a copy) leave them unnamed: then
                # the fusion is named by its named instruction nearest the root.
                names = [e[3] for e in [roots[calls], *computations[calls][::-1]] if e[3]]
                described[name] = (_kind(fused(calls)), (names or [op_name])[0], shape)
            else:
                described[name] = (_kind({opcode}), op_name, shape)
    return described


def source(op_name: str) -> tuple:
    """(pass, code path) of an op_name, e.g. ('backward', 'TransformerLm/layers/ffn/mul')."""
    phase = "backward" if "transpose(" in op_name else "forward" if "jvp(" in op_name else "other"
    path = re.sub(r"^jit\(step\)/", "", op_name)
    path = _WRAPPERS.sub("", re.sub(r"(?:transpose|jvp|jit)\(|\)+(?=/|$)", "", path))
    return phase, _INSTANCE.sub("", path).strip("/") or "?"


class Profile(NamedTuple):
    groups: dict  # {(pass, kind, code path): [ms per step, ops per step]}
    ops: dict  # {(pass, kind, code path, instruction, shape): ms per step}
    wall_ms: float  # one step, wall clock


def loop_hlo(run) -> str:
    """The compiled HLO of a benchmark loop's step (benchmarks.minimal_loop.MinimalLoop or
    benchmarks.baseline.Baseline)."""
    return run.step.lower(run.params, run.opt_state, run.batches[0]).compile().as_text()


def op_times(hlo: str, interval, steps: int) -> Profile:
    """Where a step spends its time: `hlo` the step's compiled HLO, `interval(n)` runs n steps
    and returns seconds per step (a benchmark loop's, or pax.train.compiled_step's)."""
    described = _instructions(hlo)
    interval(1)  # compiled and warm before the trace
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir)
        wall_ms = interval(steps) * 1e3
        jax.profiler.stop_trace()
        (path,) = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)
        profile = ProfileData.from_file(path)
    groups, ops = collections.defaultdict(lambda: [0.0, 0]), collections.Counter()
    for plane in profile.planes:
        for line in plane.lines:
            if line.name == "Async XLA Ops":  # a TPU's copies again, overlapping the ops line
                continue
            for event in line.events:
                # XLA:CPU names an op's event by its instruction; a TPU by the instruction's
                # whole HLO text, "%fusion.3 = bf16[...] fusion(...)".
                name = event.name[1:].split(" ", 1)[0] if event.name[:1] == "%" else event.name
                if name in described:
                    kind, op_name, shape = described[name]
                    phase, code = source(op_name)
                    ms = event.duration_ns / 1e6 / steps
                    group = groups[(phase, kind, code)]
                    group[0] += ms
                    group[1] += 1 / steps
                    ops[(phase, kind, code, name, shape)] += ms
    return Profile(dict(groups), dict(ops), wall_ms)


def _by_kind(groups: dict) -> collections.Counter:
    totals = collections.Counter()
    for (phase, kind, _), (ms, _) in groups.items():
        totals[(phase, kind)] += ms
    return totals


def report(model: Profile, baseline: Profile, top: int = 15) -> str:
    """The per-kind comparison of the two programs, then each one's costliest code paths and
    single ops."""
    mine, theirs = _by_kind(model.groups), _by_kind(baseline.groups)
    lines = [
        f"profile      ms per step; ops traced on {len(os.sched_getaffinity(0))} core(s) (on "
        "more than one, ops overlap: pin to one core with taskset -c 0 for CPU time per op)",
        f"  {'pass':9s} {'kind':22s} {'model':>9s} {'baseline':>9s} {'difference':>10s}",
    ]
    keys = sorted(set(mine) | set(theirs), key=lambda k: -max(mine[k], theirs[k]))
    for phase, kind in keys:
        m, b = mine[(phase, kind)], theirs[(phase, kind)]
        lines.append(f"  {phase:9s} {kind:22s} {m:9.1f} {b:9.1f} {m - b:+10.1f}")
    m, b = sum(mine.values()), sum(theirs.values())
    lines.append(f"  {'all ops':32s} {m:9.1f} {b:9.1f} {m - b:+10.1f}")
    m, b = model.wall_ms, baseline.wall_ms
    lines.append(f"  {'step (wall)':32s} {m:9.1f} {b:9.1f} {m - b:+10.1f}")
    for label, p in (("model", model), ("baseline", baseline)):
        lines.append(f"{label} ops by source, the {top} costliest (ms per step, ops per step):")
        costliest = sorted(p.groups.items(), key=lambda item: -item[1][0])[:top]
        for (phase, kind, code), (ms, count) in costliest:
            lines.append(f"  {ms:9.1f} {count:4.0f}  {phase:9s} {kind:15s} {code}")
        lines.append(f"{label} single ops, the {top} costliest (ms per step, instruction, shape):")
        for (phase, kind, code, name, shape), ms in sorted(p.ops.items(), key=lambda i: -i[1])[
            :top
        ]:
            lines.append(f"  {ms:9.1f}  {phase:9s} {kind:15s} {name} {shape}  {code}")
    return "\n".join(lines)
