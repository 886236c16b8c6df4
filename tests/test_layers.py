"""The import graph: dependencies point one way (docs/architecture.md, "Layers").

- the trainer's packages import nothing of the distribution packages or the tools;
- the distribution packages import no tools, and they, pax.docs and the base modules (pax.errors,
  pax.paths, pax.envinfo, ...) import no jax, numpy or the like at any depth: nox runs them from
  the small tools venv, so every pax module they import, and every module that one imports, is
  followed to the end;
- the tools: pax.curves (reference bands, the runs broken on purpose that calibrate them) and
  pax.aot (compiles experiments for a topology, writes README's table), which import both
  sides, so neither side imports them;
- no two packages of pax import each other, directly or around a circle;
- inside a package, no two modules import each other;
- the lock model (pax.lockfile: pins, locks, version order) imports the standard library alone
  (pax.errors where pax is importable), so pax.envinfo, which the trainer and a bare image read,
  keeps to the standard library and the base modules while sharing it with the distribution.
Read from the source (ast), so a lazy import inside a function counts too.
"""

import ast
import sys
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


def _imports(tree: ast.AST, package: str) -> set[str]:
    """The names a module's source imports anywhere in it (a function's lazy import too);
    PACKAGE is the one its relative imports start from."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(filter(None, (base, node.module)))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _read(path: Path) -> set[str]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _imports(ast.parse(path.read_text()), package)


MODULES = {_module_name(p): _read(p) for p in PAX.rglob("*.py")}
BASE = {m for m in MODULES if m.count(".") <= 1 and not (PAX / m.split(".")[-1]).is_dir()}
BASE -= TOOL_MODULES | {"pax.main"}  # the base modules: pax, pax.errors, pax.paths, ...
NO_ML = DISTRIBUTION | {"docs"}  # pax.docs writes the docs' generated blocks, from nox


def _executed(name: str) -> list[str]:
    """The pax modules that `import NAME` runs: pax.a.b runs pax, pax.a and pax.a.b (NAME may
    end in a function or class, as `from pax.a import f` is recorded)."""
    parts = name.split(".")
    return [m for i in range(1, len(parts) + 1) if (m := ".".join(parts[:i])) in MODULES]


def _ml_chain(start: str) -> str | None:
    """The shortest import chain from module START to a machine-learning package, as
    `pax.images.build -> pax.envinfo -> numpy`, or None."""
    came_from = {start: None}
    queue = [start]
    for module in queue:
        for name in sorted(MODULES[module]):
            if name.split(".")[0] in ML:
                chain = [name.split(".")[0], module]
                while came_from[chain[-1]]:
                    chain.append(came_from[chain[-1]])
                return " -> ".join(reversed(chain))
            for executed in _executed(name):
                if executed not in came_from:
                    came_from[executed] = module
                    queue.append(executed)
    return None


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
def test_distribution_imports_no_tools(package):
    for module, imported in MODULES.items():
        if _package(module) == package:
            assert not {_package(n) for n in imported if n.startswith("pax.")} & TOOLS, module
            assert not imported & TOOL_MODULES, module


@pytest.mark.parametrize("package", sorted(NO_ML) + ["(base modules)"])
def test_distribution_and_base_modules_import_no_jax_at_any_depth(package):
    modules = (
        sorted(BASE)
        if package == "(base modules)"
        else [m for m in MODULES if _package(m) == package]
    )
    assert modules
    chains = [chain for m in modules if (chain := _ml_chain(m))]
    assert not chains, "\n".join(chains)


def test_lazy_and_relative_imports_are_read_and_chains_followed_to_the_end(monkeypatch):
    lazy = ast.parse("def f():\n    from .envinfo import describe\n    import os\n")
    assert _imports(lazy, "pax") == {"pax.envinfo", "pax.envinfo.describe", "os"}
    graph = {
        "pax": set(),
        "pax.images": set(),
        "pax.images.build": {"pax.envinfo.describe", "json"},
        "pax.envinfo": {"os", "numpy"},
    }
    monkeypatch.setattr(sys.modules[__name__], "MODULES", graph)
    assert _ml_chain("pax.images.build") == "pax.images.build -> pax.envinfo -> numpy"
    assert _ml_chain("pax.images") is None


def _outside_stdlib(module: str) -> set[str]:
    return {n for n in MODULES[module] if n.split(".")[0] not in sys.stdlib_module_names}


def test_the_lock_model_imports_the_standard_library_alone():
    assert _outside_stdlib("pax.lockfile") <= {"pax.errors", "pax.errors.PaxError"}


def test_envinfo_keeps_to_the_standard_library_and_the_lock_model():
    outside = _outside_stdlib("pax.envinfo")
    assert all(n.split(".")[0] == "pax" for n in outside), outside
    assert {m for n in outside for m in _executed(n)} <= {
        "pax",
        "pax.errors",
        "pax.paths",
        "pax.lockfile",
    }


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
