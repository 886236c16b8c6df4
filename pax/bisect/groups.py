"""Package changes grouped as they must move together (jax with jaxlib, its plugins and libtpu;
each nvidia-*-cuNN family; the user's --group sets), ordered dependencies first. When GOOD and
BAD name different Pythons, the interpreter's move is one more group (`python_group`), holding
no package: every package depends on it, so it comes first."""

from __future__ import annotations

import dataclasses
import re

from pax import lockfile
from pax.releases import diff as dist_diff

_JAX_RE = re.compile(r"^(jax|jaxlib|libtpu|libtpu-nightly|jax-(cuda|rocm)\d*(-\w+)*|jax-tpu.*)$")
_NVIDIA_RE = re.compile(r"^nvidia-.+-(cu\d+)$")


@dataclasses.dataclass(frozen=True)
class Group:
    name: str
    changes: tuple[dist_diff.Change, ...]
    python: tuple[str, str] | None = None  # the interpreter's move, GOOD's to BAD's ("3.11")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.changes)

    def describe(self) -> str:
        if self.python:
            return self.name
        if len(self.changes) == 1:
            return self.changes[0].describe()
        return f"{self.name}: " + ", ".join(c.describe() for c in self.changes)

    def as_json(self) -> dict:
        data = {"name": self.name, "changes": [c.as_json() for c in self.changes]}
        if self.python:
            data["python"] = {"good": self.python[0], "bad": self.python[1]}
        return data


def python_group(good: str, bad: str) -> Group:
    """The interpreter's move as a group: candidates with it applied run on BAD's Python."""
    return Group(f"Python {good} -> {bad}", (), (good, bad))


def auto_group(name: str) -> str | None:
    if _JAX_RE.match(name):
        return "jax"
    match = _NVIDIA_RE.match(name)
    if match:
        return f"nvidia-*-{match.group(1)}"
    return None


def make_groups(
    changes: list[dist_diff.Change], user_groups: list[list[str]] = (), log=print
) -> list[Group]:
    """One group per change, except the couplings (automatic and user-given), merged."""
    changed = {c.name: c for c in changes}
    parent = {name: name for name in changed}
    label: dict[str, str] = {}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra
            names = sorted({label[r] for r in (ra, rb) if r in label})
            if names:
                label[ra] = " + ".join(names)

    first_of: dict[str, str] = {}
    for name in sorted(changed):
        key = auto_group(name)
        if key is None:
            continue
        if key in first_of:
            union(first_of[key], name)
        else:
            first_of[key] = name
            label[name] = key
    for members in user_groups:
        canon = [lockfile.canonicalize(m) for m in members if m.strip()]
        unknown = [m for m in canon if m not in changed]
        if unknown:
            log(f"--group: {', '.join(unknown)} did not change between the locks; ignored")
        kept = [m for m in canon if m in changed]
        for other in kept[1:]:
            union(kept[0], other)
        if len(kept) > 1:
            root = find(kept[0])
            label.setdefault(root, "+".join(kept))
    members: dict[str, list[dist_diff.Change]] = {}
    for name in sorted(changed):
        members.setdefault(find(name), []).append(changed[name])
    groups = []
    for root, items in members.items():
        name = label.get(root, root) if len(items) > 1 else items[0].name
        groups.append(Group(name, tuple(items)))
    return sorted(groups, key=lambda g: g.name)


def order_groups(groups: list[Group], requires) -> list[Group]:
    """Dependencies first, so a prefix of the groups tends to be installable; else by name.

    `requires(pin) -> set of names` reads a wheel's dependencies. A group goes after the groups
    its new versions depend on; a removal goes after the groups whose old versions needed it.
    The interpreter's move goes first: BAD's packages may need BAD's Python (jax 0.12 does not
    install on 3.11), so every prefix past it installs on the Python BAD was locked for.
    """
    where = {name: i for i, g in enumerate(groups) for name in g.names}
    after: dict[int, set[int]] = {i: set() for i in range(len(groups))}  # i after these
    for i, group in enumerate(groups):
        for change in group.changes:
            if change.new is not None:
                for dep in requires(change.new):
                    j = where.get(dep)
                    if j is not None and j != i:
                        after[i].add(j)
    for j, group in enumerate(groups):
        for change in group.changes:
            if change.new is None:  # removed: after the groups whose old versions needed it
                for i, other in enumerate(groups):
                    if i != j and any(
                        c.old is not None and change.name in requires(c.old) for c in other.changes
                    ):
                        after[j].add(i)
    ordered, placed = [], set()
    while len(ordered) < len(groups):
        ready = [i for i in range(len(groups)) if i not in placed and after[i] <= placed]
        if not ready:  # a cycle: take the first by name, the rest follow
            ready = [i for i in range(len(groups)) if i not in placed]
        pick = min(ready, key=lambda i: (groups[i].python is None, groups[i].name))
        placed.add(pick)
        ordered.append(groups[pick])
    return ordered


# Steps -------------------------------------------------------------------------------------
