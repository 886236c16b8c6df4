"""Tiny wheels built on the fly (zipfile only), and pip-compile-style lockfiles over them.

Also the bisect scenario over them: PACKAGES, and CHECK, the COMMAND (`python check.py`),
which fails when an installed module says BROKEN, or when modules carrying tokens x and y
are installed together (an interaction). `build_index` writes both.
"""

from __future__ import annotations

import base64
import hashlib
import textwrap
import zipfile
from pathlib import Path

CHECK = textwrap.dedent("""\
    import importlib, importlib.metadata as md, os, random, sys
    tokens = set()
    for dist in sorted(md.distributions(), key=lambda d: d.metadata["Name"]):
        mod = importlib.import_module(dist.metadata["Name"].replace("-", "_"))
        tokens |= set(getattr(mod, "TOKENS", ()))
        if getattr(mod, "BROKEN", False):
            print(f"{dist.metadata['Name']} {dist.version} is broken")
            sys.exit(1)
    broken = {"x", "y"} <= tokens
    rate = float(os.environ.get("FLAKE_RATE") or 0)
    if rate and not broken:  # a good env fails now and then; a broken one never passes
        counter = os.environ["FLAKE_COUNTER"]  # numbers the runs of the whole bisect
        n = int(open(counter).read() or 0) + 1 if os.path.exists(counter) else 1
        open(counter, "w").write(str(n))
        if random.Random(f"{os.environ.get('FLAKE_SEED', '0')}:{n}").random() < rate:
            print(f"flake! (run {n})")
            sys.exit(1)
    print("x and y together break" if broken else f"ok ({len(tokens)} tokens)")
    sys.exit(1 if broken else 0)
""")

_NEEDS_312 = ("py3-none-any", "Requires-Python: >=3.12\n")

# name -> {version: (body, requires[, wheel tag[, METADATA lines[, files]]])}
PACKAGES = {
    **{
        f"p{i:02d}": {"1.0": ("", ()), "1.1": ("BROKEN = True" if i == 13 else "", ())}
        for i in range(22)
    },
    "gone": {"1.0": ("", ())},
    "fresh": {"1.0": ("", ())},
    # 0.3 needs Python 3.12, as jax 0.12 does: it has no wheel for 3.11
    **{
        name: {"0.1": ("", ()), "0.2": ("", ()), "0.3": ("", (), *_NEEDS_312)}
        for name in ("jax", "jaxlib")
    },
    "libtpu": {"0.1": ("", ()), "0.2": ("BROKEN = True", ())},
    **{f"q{i:02d}": {"1.0": ("", ()), "2.0": ("", ())} for i in range(6)},
    "alpha": {"1": ("", ()), "2": ("TOKENS = {'x'}", ())},
    "beta": {"1": ("", ()), "2": ("TOKENS = {'y'}", ())},
    **{f"r{i:02d}": {"1": ("", ()), "2": ("", ())} for i in range(8)},
    **{f"a{i:02d}": {"1": ("", ()), "2": ("", ())} for i in range(3)},
    "m-core": {"1": ("", ()), "2": ("", ())},
    "m-user": {"1": ("", ("m-core<2",)), "2": ("", ("m-core>=2",))},
    **{
        f"z{i:02d}": {"1": ("", ()), "2": ("BROKEN = True" if i == 2 else "", ())} for i in range(4)
    },
    # a package that puts a command on PATH (its console script `toolcmd`)
    "tool": {
        "1.0": (
            "def main():\n    print('toolcmd ran')",
            (),
            "py3-none-any",
            "",
            {"{dist}.dist-info/entry_points.txt": "[console_scripts]\ntoolcmd = tool:main\n"},
        )
    },
    # --versions: releases 1.1..1.7 between 1.0 and 2.0; the break comes with 1.6; 1.3 fails
    # pip check, 1.4 has no wheel for Python 3; 1.6rc1 is a pre-release (not walked).
    "vpkg": {
        "1.0": ("", ()),
        "1.1": ("", ()),
        "1.2": ("", ()),
        "1.3": ("", ("m-core>=5",)),
        "1.4": ("", (), "py2-none-any"),
        "1.5": ("", ()),
        "1.6rc1": ("BROKEN = True", ()),
        **{v: ("BROKEN = True", ()) for v in ("1.6", "1.7", "2.0")},
    },
}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(
    folder: Path,
    name: str,
    version: str,
    body: str = "",
    requires: tuple[str, ...] = (),
    tag: str = "py3-none-any",
    metadata: str = "",
    extra: dict[str, str] | None = None,
) -> Path:
    """A pure-Python wheel holding module `name` (dashes -> underscores) with VERSION and body.

    A `tag` other than py3-none-any (say py2-none-any) makes a wheel no Python 3 installs;
    `extra` adds files (path in the wheel -> text), `{dist}` in a path standing for
    NAME-VERSION (say `{dist}.dist-info/entry_points.txt`)."""
    module = name.replace("-", "_")
    dist = f"{module}-{version}"
    files = {
        f"{module}/__init__.py": f"VERSION = {version!r}\n{body}\n",
        f"{dist}.dist-info/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires)
        + metadata,  # more METADATA header lines (License-Expression, Classifier, ...)
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: pax-tests\n"
        f"Root-Is-Purelib: true\nTag: {tag}\n",
        **{path.format(dist=dist): text for path, text in (extra or {}).items()},
    }
    record = [
        f"{path},{_record_hash(text.encode())},{len(text.encode())}" for path, text in files.items()
    ]
    files[f"{dist}.dist-info/RECORD"] = "\n".join(record + [f"{dist}.dist-info/RECORD,,"]) + "\n"
    path = Path(folder) / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in files.items():
            info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            zf.writestr(info, text)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_lock(path: Path, pins: dict[str, str], index: Path, python: str | None = None) -> Path:
    """A pip-compile-style lock of `name==version` with the sha256 of the index's wheel; its
    header names `python` ("3.11") as pip-compile's does, where given."""
    said = f"by pip-compile with Python {python}" if python else "for a test"
    lines = ["#", f"# This file is autogenerated {said}", "#"]
    for name in sorted(pins):
        wheel = Path(index) / f"{name.replace('-', '_')}-{pins[name]}-py3-none-any.whl"
        lines.append(f"{name}=={pins[name]} \\\n    --hash=sha256:{sha256(wheel)}")
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)


def build_index(folder: Path) -> Path:
    """Every wheel of PACKAGES in `folder`, and CHECK beside it as `folder/../check.py`."""
    for name, versions in PACKAGES.items():
        for version, spec in versions.items():
            build_wheel(folder, name, version, *spec)
    (Path(folder).parent / "check.py").write_text(CHECK)
    return Path(folder)
