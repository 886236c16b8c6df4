"""The import graph: dependencies point one way (ARCHITECTURE.md, 'Arrows point down').

- the trainer's packages import nothing of the distribution packages or the tools;
- the distribution packages import no jax (nox runs them from the small tools venv) and no tools;
- the tools: pax.curves (reference bands, the runs broken on purpose that calibrate them) and
  pax.aot (compiles experiments for a topology, writes README's table), which import both
  sides, so neither side imports them;
- no two packages of pax import each other, directly or around a circle;
- inside a package, no two modules import each other.
Read from the source (ast), so a lazy import inside a function counts too.
"""

import ast
from pathlib import Path

import pytest

from pax import paths

PAX = paths.PACKAGE
TRAINER = {
    "experiments",
    "tasks",
    "models",
    "parallel",
    "optim",
    "data",
    "train",
    "checkpoint",
    "decode",
}
DISTRIBUTION = {"releases", "environments", "images", "bisect", "launch"}
TOOLS = {"curves"}
TOOL_MODULES = {"pax.aot"}  # a command on top, beside pax.main
ML = {"jax", "jaxlib", "flax", "optax", "orbax", "numpy", "tensorstore", "grain"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PAX.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


MODULES = {_module_name(p): _imports(p) for p in PAX.rglob("*.py")}


def _package(module: str) -> str:
    """`train` for pax.train.loop; '' for the base modules (pax.errors, pax.git, pax.pip)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PAX / parts[1]).is_dir() else ""


PACKAGES = {m for m in MODULES if m.count(".") == 1 and (PAX / m.split(".")[1]).is_dir()}


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, imported in MODULES.items():
        src = _package(module)
        if not src:
            continue
        for name in imported:
            if name.startswith("pax.") and (dst := _package(name)) and dst != src:
                graph.setdefault(src, set()).add(dst)
    return graph


def test_the_layers_are_what_the_architecture_says():
    assert {p.split(".")[1] for p in PACKAGES} >= TRAINER | DISTRIBUTION | TOOLS


@pytest.mark.parametrize("package", sorted(TRAINER))
def test_trainer_imports_no_distribution_code_or_tools(package):
    graph = _package_graph()
    assert not graph.get(package, set()) & (DISTRIBUTION | TOOLS)
    for module, imported in MODULES.items():
        if _package(module) == package:
            assert not imported & TOOL_MODULES, module


@pytest.mark.parametrize("package", sorted(DISTRIBUTION))
def test_distribution_imports_no_jax_and_no_tools(package):
    for module, imported in MODULES.items():
        if _package(module) == package:
            roots = {name.split(".")[0] for name in imported}
            assert not roots & ML, f"{module} imports {sorted(roots & ML)}"
            assert not {_package(n) for n in imported if n.startswith("pax.")} & TOOLS, module
            assert not imported & TOOL_MODULES, module


def test_no_import_cycles_between_packages():
    graph = _package_graph()

    def reaches(start, goal, seen=()):
        return any(
            n == goal or (n not in seen and reaches(n, goal, (*seen, n)))
            for n in graph.get(start, ())
        )

    circles = sorted(p for p in graph if reaches(p, p))
    assert not circles, {p: sorted(graph[p]) for p in circles}


def test_no_two_modules_import_each_other():
    pairs = sorted(
        (a, b)
        for a, imported in MODULES.items()
        for b in imported & set(MODULES)
        if a < b
        and a in MODULES.get(b, set())
        and a.rsplit(".", 1)[0] != b
        and b.rsplit(".", 1)[0] != a
    )
    assert not pairs
