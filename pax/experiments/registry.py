"""Experiments by name: a decorator registers a class under its module-qualified name.

Names drop the package prefix, as Pax's do: the class LmCloudSpmdTiny in
pax/tasks/lm/params/lm_cloud.py is `tasks.lm.params.lm_cloud.LmCloudSpmdTiny`. Lookup takes the
full name or any unique dotted suffix of it (`lm_cloud.LmCloudSpmdTiny`, `LmCloudSpmdTiny`).
"""

import difflib
import importlib
import pkgutil

from pax.errors import UsageError

_PACKAGE_PREFIX = "pax."
_EXPERIMENT_PACKAGES = ("pax.tasks",)
_REGISTRY: dict[str, type] = {}
_PAX_REFERENCES: set[str] = set()  # experiments that carry Pax's own names and numbers


def name_of(experiment_cls: type) -> str:
    return (
        f"{experiment_cls.__module__.removeprefix(_PACKAGE_PREFIX)}.{experiment_cls.__qualname__}"
    )


def register(experiment_cls: type | None = None, *, pax_reference: bool = False):
    """`@register`, or `@register(pax_reference=True)` for a class that reproduces one of
    Pax's own experiments (what the fidelity tests, the AOT table and the launchers cover)."""

    def add(cls: type) -> type:
        name = name_of(cls)
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"experiment {name} is registered twice")
        _REGISTRY[name] = cls
        if pax_reference:
            _PAX_REFERENCES.add(name)
        return cls

    return add if experiment_cls is None else add(experiment_cls)


def _import_all() -> None:
    for package_name in _EXPERIMENT_PACKAGES:
        package = importlib.import_module(package_name)
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)


def names() -> list[str]:
    _import_all()
    return sorted(_REGISTRY)


def pax_references() -> list[str]:
    """The registered experiments that reproduce Pax's own, by name."""
    _import_all()
    return sorted(_PAX_REFERENCES)


def get(name: str) -> type:
    """The experiment class for a full name or a unique dotted suffix; UsageError otherwise."""
    all_names = names()
    name = name.removeprefix(_PACKAGE_PREFIX)
    if name in _REGISTRY:
        return _REGISTRY[name]
    matches = [n for n in all_names if n.endswith("." + name)]
    if len(matches) == 1:
        return _REGISTRY[matches[0]]
    if matches:
        raise UsageError(
            f"experiment {name!r} is ambiguous: it matches {', '.join(matches)}; "
            "give more of the dotted name"
        )
    class_names = {n.rsplit(".", 1)[1]: n for n in all_names}
    close = difflib.get_close_matches(name, all_names, n=3, cutoff=0.5)
    close += [
        class_names[c]
        for c in difflib.get_close_matches(name.rsplit(".", 1)[-1], list(class_names), n=3)
    ]
    close = list(dict.fromkeys(close))[:3]
    hint = f"closest: {', '.join(close)}" if close else f"registered: {', '.join(all_names)}"
    raise UsageError(f"unknown experiment {name!r}; {hint} (list all with --list_experiments)")
