"""Which environment is this? The identity a pinned env or image carries, and its drift.

Every pinned environment (`.venv/pax-<release>-<platform>`, the images' `/opt/venv`) holds one
small file, `pax-env.json`, next to `pyvenv.cfg` (so it is found from `sys.prefix`, however the
interpreter was started): the release, the lock platform, the lockfile, its sha256 and the
locked versions. The distribution side writes it when it builds the env (pax.environments.venv,
pax.images.build); this module only reads it, so the trainer can too: stdlib only, no jax, no
distribution code (locks, names and installed sets are read by pax.lockfile, as everywhere).

PAX_RELEASE, PAX_PLATFORM, PAX_LOCKFILE and PAX_LOCK_SHA256 still override the file's fields.

Drift: the installed set (the first distribution of each name on sys.path, i.e. what `import`
loads) is compared with the lock the env names, and with every release lock this checkout or
wheel carries, to name the nearest release and platform and the differences.

`python -m pax env [--json]` prints all of it; exit 0 when the environment is exactly a release
lock, 1 when it is not, 2 on bad usage.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import sys
from pathlib import Path

from pax import paths
from pax.errors import ExitingArgumentParser, PaxError
from pax.lockfile import (
    Lock,
    LockfileError,
    difference_text,
    differences,
    installed,
    lock_versions,
    sha256_file,
    version_key,
)

IDENTITY_FILE = "pax-env.json"
FORMAT = "pax-env/1"
OVERRIDES = ("PAX_RELEASE", "PAX_PLATFORM", "PAX_LOCKFILE", "PAX_LOCK_SHA256")
LOCK_FIELDS = ("release", "platform", "lockfile", "lock_sha256")  # what names a lock
# pax itself is never in a lock: images install its wheel next to the lock, checkouts put it on
# PYTHONPATH. Its version is reported apart.
SELF = "pax"
PLATFORM_ORDER = ("cpu", "tpu", "gpu")
_RELEASE_DIR_RE = re.compile(r"^\d+(\.\d+)*$")


class IdentityError(PaxError, ValueError):
    """A pax-env.json that cannot be read as one."""


@dataclasses.dataclass(frozen=True)
class Identity:
    """What a pinned environment was built from."""

    release: str
    platform: str
    lockfile: str
    lock_sha256: str
    python: str
    locked: dict[str, str]
    # The commit whose pax an image packs (its release's source, or the tree a dev image was
    # built from); absent from venvs, which run the checkout, and from older identity files.
    source_revision: str | None = None
    # Packages of the lock an image's recipe leaves out on purpose (Dockerfile.gpu says why):
    # the environment is the lock without them.
    left_out: tuple[str, ...] = ()

    def to_json(self) -> str:
        body = {"format": FORMAT, **dataclasses.asdict(self)}
        body["locked"] = dict(sorted(self.locked.items()))
        if body["source_revision"] is None:
            del body["source_revision"]
        if not body["left_out"]:
            del body["left_out"]
        return json.dumps(body, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = IDENTITY_FILE) -> Identity:
        try:
            body = json.loads(text)
        except json.JSONDecodeError as e:
            raise IdentityError(f"{source}: not JSON ({e})") from None
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise IdentityError(f"{source}: not a {FORMAT} file")
        fields = dataclasses.fields(cls)
        missing = [
            f.name for f in fields if f.name not in body and f.default is dataclasses.MISSING
        ]
        if missing:
            raise IdentityError(f"{source}: missing {', '.join(missing)}")
        if not isinstance(body["locked"], dict):
            raise IdentityError(f"{source}: locked is not a name -> version table")
        values = {f.name: body[f.name] for f in fields if f.name in body}
        values["left_out"] = tuple(values.get("left_out", ()))
        return cls(**values)


def identity_path(prefix: str | Path | None = None) -> Path:
    return Path(sys.prefix if prefix is None else prefix) / IDENTITY_FILE


def read_identity(prefix: str | Path | None = None) -> Identity | None:
    """The identity of the environment at prefix (default: this interpreter's), or None."""
    path = identity_path(prefix)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise IdentityError(f"{path}: {e.strerror}") from None
    return Identity.from_json(text, str(path))


@functools.cache
def _catalog(directory: str) -> tuple[Lock, ...]:
    locks = []
    for release in Path(directory).iterdir():
        if not (release.is_dir() and _RELEASE_DIR_RE.match(release.name)):
            continue  # nightly and friends are not releases
        for platform in PLATFORM_ORDER:
            path = release / f"{platform}.txt"
            if path.is_file():
                try:
                    locks.append(Lock.read(path, release=release.name, platform=platform))
                except LockfileError:
                    continue  # a lock nobody can install from names no environment
    return tuple(locks)


def catalog(directory: Path | None = None) -> tuple[Lock, ...]:
    """Every release lock found (see paths.releases_dir); empty when none is."""
    directory = directory or paths.releases_dir()
    return _catalog(str(directory)) if directory.is_dir() else ()


def nearest(have: dict[str, str], locks, prefer_platform: str | None = None):
    """(lock, differences, tied) for the lock with the fewest differences from `have`; ties go
    to the preferred platform, then the newest release, and the others at the same distance are
    `tied` (releases can share a lock's set: 1.6.0 changed only the cpu lock). None without locks."""
    ranked = []
    for lock in locks:
        rows = differences(have, lock.versions)
        ranked.append(((len(rows), lock.platform != prefer_platform), lock, rows))
    if not ranked:
        return None
    ranked.sort(key=lambda item: version_key(item[1].release), reverse=True)  # newest first
    ranked.sort(key=lambda item: item[0])  # stable: the newest of equals stays first
    _, lock, rows = ranked[0]
    tied = [other for key, other, _ in ranked[1:] if key[0] == len(rows)]
    return lock, rows, tied


def describe(
    environ: dict | None = None,
    prefix: str | Path | None = None,
    have: dict[str, str] | None = None,
    locks=None,
) -> dict:
    """The environment's identity and drift, as manifest.json and `pax env --json` record it.

    state: `exact` (the installed set is a release lock), `superset` (every pin of the lock the
    env names, or without a name of a release lock, is installed at its version, and other
    packages besides: the differences are those extras alone), `drifted` (the env names a lock
    and its pins differ) or `unpinned` (it names none, and holds no release lock's pins)."""
    environ = os.environ if environ is None else environ
    prefix = Path(sys.prefix if prefix is None else prefix)
    have = installed() if have is None else have
    notes = []
    try:
        ident = read_identity(prefix)
    except IdentityError as e:
        ident = None
        notes.append(f"ignored {e}")
    overridden = [var for var in OVERRIDES if environ.get(var)]
    named, locked = _named(ident, environ, overridden, notes)
    left_out = ident.left_out if ident else ()
    state, rows, near = _drift(have, locked, named, locks, left_out)
    # What `differences` is measured against: the lock the env names (or matches), else the
    # nearest release lock.
    if state == "unpinned":
        compared = near and {k: near[k] for k in LOCK_FIELDS}
    else:
        compared = {k: named[k] for k in LOCK_FIELDS}
    return {
        "state": state,
        "prefix": str(prefix),
        "python": sys.version.split()[0],
        "identity": str(identity_path(prefix)) if ident else None,
        "overridden_by": overridden,
        **named,
        "pax": have.get(SELF),
        "source_revision": ident.source_revision if ident else None,
        "installed_count": len(set(have) - {SELF}),
        "left_out": list(left_out),
        "compared_with": compared,
        "differences": rows,
        "nearest": near,
        "notes": notes,
    }


def _named(ident: Identity | None, environ, overridden: list[str], notes: list[str]):
    """(the lock the env names: LOCK_FIELDS, its identity's unless a PAX_* variable overrides
    them; that lock's versions, None when there are none to read), with notes on what
    contradicts them."""
    named = {k: getattr(ident, k) if ident else None for k in LOCK_FIELDS}
    locked = dict(ident.locked) if ident else None
    for var in overridden:
        named[var[len("PAX_") :].lower()] = environ[var]
    if "PAX_LOCKFILE" in overridden:
        locked = _override_lock(environ, named, notes)
    elif ident and os.path.isfile(ident.lockfile):
        if sha256_file(ident.lockfile) != ident.lock_sha256:
            notes.append(f"{ident.lockfile} changed since this environment was built from it")
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if ident and ident.python != running:
        # The same versions under another Python are other wheels: not the env the lock made.
        notes.append(f"{IDENTITY_FILE} was written for Python {ident.python}; this is {running}")
    return named, locked


def _override_lock(environ, named: dict, notes: list[str]) -> dict[str, str] | None:
    """PAX_LOCKFILE's versions (None when it cannot be read), its sha256 put in `named`."""
    lockfile = environ["PAX_LOCKFILE"]
    try:
        data = Path(lockfile).read_bytes()
    except OSError as e:
        notes.append(f"PAX_LOCKFILE {lockfile}: {e.strerror}")
        return None
    named["lock_sha256"] = hashlib.sha256(data).hexdigest()
    try:
        locked = lock_versions(data.decode(), lockfile)
    except LockfileError as e:
        notes.append(f"PAX_LOCKFILE {e}")
        locked = None
    wanted = environ.get("PAX_LOCK_SHA256")
    if wanted and wanted != named["lock_sha256"]:
        notes.append(f"PAX_LOCK_SHA256 {wanted[:12]} is not the sha256 of {lockfile}")
    return locked


def _drift(have: dict[str, str], locked: dict[str, str] | None, named: dict, locks, left_out=()):
    """(state, differences, nearest release lock) of the installed set; an env that names no
    lock but is exactly a release's is named by it (in `named`). An image's left-out packages
    are absent from an exact env."""
    rows = differences(have, locked, left_out=left_out) if locked is not None else None
    if rows == []:
        return "exact", rows, None
    locks = catalog() if locks is None else locks
    found = nearest(have, locks, named["platform"])
    if rows is None:
        # No lock named: the release lock whose every pin is installed, with the fewest others.
        held = nearest(have, [lock for lock in locks if _only_extras(have, lock.versions)])
        found = held or found
    near = found and {
        "release": found[0].release,
        "platform": found[0].platform,
        "lock_sha256": found[0].sha256,
        "lockfile": found[0].label,
        "differences": len(found[1]),
        "tied": [f"{lock.release} {lock.platform}" for lock in found[2]],
    }
    if rows is None and found and _only_extras(have, found[0].versions):
        named.update({k: near[k] for k in LOCK_FIELDS})
        return ("superset" if found[1] else "exact"), found[1], near
    if rows is None:
        return "unpinned", found[1] if found else [], near
    if all(r["kind"] == "extra" for r in rows):
        return "superset", rows, near
    return "drifted", rows, near


def _only_extras(have: dict[str, str], locked: dict[str, str]) -> bool:
    """Whether every pin of `locked` is installed at its version (other packages may be)."""
    return all(have.get(name) == version for name, version in locked.items())


def _release_name(release, platform) -> str:
    return f"release {release} {platform or '?'}"


def _count(n: int) -> str:
    return f"{n} difference{'' if n == 1 else 's'}"


def summary(desc: dict, limit: int = 3) -> str:
    """One line: the run's first log line."""
    rows = desc["differences"] or []
    shown = "; ".join(difference_text(r) for r in rows[:limit])
    more = f"; {len(rows) - limit} more in manifest.json" if len(rows) > limit else ""
    count = _count(len(rows))
    near = desc["nearest"]
    near_text = (
        f"nearest {_release_name(near['release'], near['platform'])}"
        + (f" (as near: {', '.join(near['tied'])})" if near["tied"] else "")
        if near
        else "no release locks found to compare with"
    )
    if desc["state"] == "exact":
        source = "identity " + desc["identity"] if desc["identity"] else "no identity file"
        return (
            f"environment: {_release_name(desc['release'], desc['platform'])}, exactly its lock "
            f"(sha256 {(desc['lock_sha256'] or '?')[:12]}, {desc['installed_count']} packages; "
            f"{source})"
        )
    if desc["state"] == "superset":
        source = "identity " + desc["identity"] if desc["identity"] else "no identity file"
        extras = [r["package"] for r in rows]
        named_near = near and near["lock_sha256"] == desc["lock_sha256"] and near["tied"]
        tied = f"; as near: {', '.join(near['tied'])}" if named_near else ""
        return (
            f"environment: {_release_name(desc['release'], desc['platform'])}, every pin of its "
            f"lock installed at its version (sha256 {(desc['lock_sha256'] or '?')[:12]}{tied}), "
            f"and {len(extras)} other package{'' if len(extras) == 1 else 's'}: "
            f"{', '.join(extras[:limit])}{more} ({source})"
        )
    if desc["state"] == "drifted":
        return (
            f"environment: DRIFTED from {_release_name(desc['release'], desc['platform'])} "
            f"(lock sha256 {(desc['lock_sha256'] or '?')[:12]}): {count}: {shown}{more}; "
            f"{near_text}"
        )
    where = f"no {IDENTITY_FILE} in {desc['prefix']}"
    if not near:
        return f"environment: UNPINNED ({where}); {near_text}"
    return f"environment: UNPINNED ({where}); {near_text}, {count}: {shown}{more}"


def render(desc: dict) -> str:
    """`pax env`'s table: identity, state, and the differences when there are any. A Python
    that is no pax env at all (no identity, no release lock's set) is told so, with where the
    envs are, instead of a table of every package."""
    lines = [f"prefix      {desc['prefix']} (Python {desc['python']})"]
    lines.append(f"identity    {desc['identity'] or f'none (no {IDENTITY_FILE} here)'}")
    if _not_a_pax_env(desc):
        lines.append(f"not a pax env: this Python has no {IDENTITY_FILE} and no release lock's set")
        lines.append(f"            {where_envs_are()}")
    if desc["overridden_by"]:
        lines.append(f"overridden  by {', '.join(desc['overridden_by'])}")
    if desc["release"] or desc["lockfile"]:
        lines.append(f"release     {desc['release'] or '?'} {desc['platform'] or '?'}")
        lines.append(f"lockfile    {desc['lockfile'] or '?'} (sha256 {desc['lock_sha256'] or '?'})")
    if desc["pax"]:
        built = f"; built from {desc['source_revision']}" if desc.get("source_revision") else ""
        lines.append(f"pax         {desc['pax']} (installed; not part of any lock{built})")
    rows = desc["differences"] or []
    near = desc["nearest"]
    if desc["state"] == "exact":
        without = ", ".join(desc.get("left_out") or ())
        lines.append(
            f"state       exact: the {desc['installed_count']} installed packages are the lock"
            + (f" without {without} (left out by the image's recipe)" if without else "")
        )
    elif desc["state"] == "superset":
        lines.append(
            f"state       superset: every pin of the lock installed at its version, and "
            f"{len(rows)} other package{'' if len(rows) == 1 else 's'}"
        )
    else:
        against = desc["compared_with"]
        if not against:
            target = "any release lock (none found)"
        elif against["release"]:
            target = f"release {against['release']} {against['platform'] or '?'}"
        else:
            target = str(against["lockfile"])
        lines.append(f"state       {desc['state']}: {_count(len(rows))} from {target}")
        if near:
            tied = f"; as near: {', '.join(near['tied'])}" if near["tied"] else ""
            lines.append(
                f"nearest     release {near['release']} {near['platform']} "
                f"({_count(near['differences'])}, {near['lockfile']}{tied})"
            )
    if rows and _not_a_pax_env(desc):
        lines.append(f"differences {len(rows)} (`--json` lists them)")
    elif rows:
        width = max(len("package"), *(len(r["package"]) for r in rows))
        vwidth = max(len("locked"), *(len(r["locked"] or "-") for r in rows))
        lines.append("")
        lines.append(f"  {'package':<{width}}  {'locked':<{vwidth}}  installed")
        for r in rows:
            lines.append(
                f"  {r['package']:<{width}}  {r['locked'] or '-':<{vwidth}}  "
                f"{r['installed'] or '-'}"
            )
    lines.extend(f"note        {note}" for note in desc["notes"])
    return "\n".join(lines)


def _not_a_pax_env(desc: dict) -> bool:
    """Unpinned, named by nothing, and holding fewer of the nearest lock's pins than it lacks
    (an env built from a lock by hand and bumped since is still one, drift table and all)."""
    if desc["state"] != "unpinned" or desc["identity"] or desc["overridden_by"]:
        return False
    rows = desc["differences"] or []
    as_locked = desc["installed_count"] - sum(1 for r in rows if r["installed"])
    return as_locked < sum(1 for r in rows if r["locked"])


def where_envs_are(locks=None, root: Path | None = None) -> str:
    """Where a release's pinned env is: the session that describes it, and its own python."""
    releases = sorted({lock.release for lock in (catalog() if locks is None else locks)})
    if not releases:
        return "a release's env: ./noxw -s env -- RELEASE PLATFORM, in a checkout of pax"
    newest = max(releases, key=version_key)
    python = (root or paths.ROOT) / ".venv" / f"pax-{newest}-cpu" / "bin" / "python"
    shown = os.path.relpath(python) if python.is_relative_to(Path.cwd()) else str(python)
    return (
        f"a release's env: ./noxw -s env -- [RELEASE] [PLATFORM], or the env's own python, "
        f"e.g. {shown} -m pax env"
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m pax env [--json]`: exit 0 when the environment is exactly a release lock."""
    parser = ExitingArgumentParser(
        prog="python -m pax env",
        description="Which environment is this: its release identity and any drift from its "
        "lock. Exit 0 when it is exactly a release lock, 1 when it is not.",
    )
    parser.add_argument("--json", action="store_true", help="print the description as JSON")
    args = parser.parse_args(argv)
    desc = describe()
    print(json.dumps(desc, indent=1) if args.json else render(desc))
    return 0 if desc["state"] == "exact" else 1
