"""What a release's images must be, kept in its release.toml's [images] table: each platform's
image ID and layers (diff IDs), the recipe and builder they were built with, and the base image
by ID with what went into it (Debian suite, point release, package set). The cut writes it
(`./noxw -s release -- X.Y.Z`), and nothing rewrites it: `./noxw -s release -- X.Y.Z
--record-images` writes it for a release that records no image (one cut before records were
kept, or a cut whose recording failed), leaving the locks alone, and refuses one that has a
record. A frozen release (pax.images.frozen) is built by its own tree, so its record holds for
every later checkout.

`./noxw -s verify` and `./noxw -s check` compare against it: `explain` says why an image ID is
not the recorded one, from the cheapest cause to the deepest (another base, another recipe,
another builder, then which layers)."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path

from pax.images import buildah, reproduce
from pax.images.build import build
from pax.images.engine import ImageError, docker, image_exists, label, require_engine
from pax.images.target import Target
from pax.releases import catalog

TABLE = "images"
RECIPE_LABEL = "io.pax.recipe.sha256"
_BASE_FACTS = (
    ". /etc/os-release; echo $VERSION_CODENAME; cat /etc/debian_version; "
    "dpkg-query -W -f='${Package} ${Version} ${Architecture}\\n' | LC_ALL=C sort"
)


def base_facts(base_image: str) -> dict:
    """The base by ID and what it is: suite, Debian point release, its package set's digest
    (sha256 of the sorted `dpkg-query -W` lines "Package Version Architecture")."""
    base_id = buildah.base_id(base_image)
    r = docker("run", "--rm", "--network", "none", "--entrypoint", "sh", base_id, "-c", _BASE_FACTS)
    suite, debian, *packages = r.stdout.splitlines()
    return {
        "base": base_image,
        "base_id": base_id,
        "base_suite": suite,
        "base_debian_version": debian,
        "base_packages": len(packages),
        "base_packages_sha256": hashlib.sha256(("\n".join(packages) + "\n").encode()).hexdigest(),
    }


def image_facts(tag: str) -> dict:
    """An image's ID, layers (diff IDs, in order) and the recipe it records."""
    out = docker("image", "inspect", "-f", "{{.Id}} {{json .RootFS.Layers}}", tag).stdout
    image_id, layers = out.strip().split(" ", 1)
    return {"id": image_id, "layers": json.loads(layers), "recipe": label(tag, RECIPE_LABEL)}


def recorded(release: catalog.Release) -> dict:
    return dict(release.meta.get(TABLE, {}))


def record(targets: list[Target], log=sys.stderr) -> dict:
    """Build each target's image (one release's platforms, on one base; an image already tagged
    with the same provenance is kept) and write [images] into the release's release.toml;
    returns the table."""
    release = targets[0].release
    refuse_rewrite(release)
    require_engine()
    table = {"recorded": datetime.date.today()}
    table.update(base_facts(targets[0].base_image))
    table["builder"] = f"buildah {buildah.version()}"
    for target in targets:
        facts = image_facts(build(target, log=log))
        platform = target.platform
        table[platform] = facts["id"]
        table[f"{platform}_layers"] = facts["layers"]
        table[f"{platform}_recipe_sha256"] = facts["recipe"]
        print(f"pax images: recorded {target.version} {platform}: {facts['id']}", file=log)
    path = release.dir / "release.toml"
    path.write_text(with_table(path.read_text(), table))
    return {k: str(v) if isinstance(v, datetime.date) else v for k, v in table.items()}


def refuse_rewrite(release: catalog.Release) -> None:
    """ImageError when the release records its images already: a user who checked an image
    against the record must still find it there."""
    have = recorded(release)
    if have:
        ids = ", ".join(f"{p} {have[p][:19]}" for p in catalog.IMAGE_PLATFORMS if p in have)
        raise ImageError(
            f"release {release.version} records its images already ({ids or 'no image ID'}, "
            f"recorded {have.get('recorded')}); a cut release's image IDs never change: compare "
            f"a build with them, ./noxw -s verify -- {release.version} tpu"
        )


def render(table: dict) -> str:
    """The [images] table as TOML, keys in a fixed order."""
    order = ["recorded", "base", "base_id", "base_suite", "base_debian_version", "base_packages"]
    order += ["base_packages_sha256", "builder"]
    for platform in catalog.IMAGE_PLATFORMS:
        order += [platform, f"{platform}_recipe_sha256", f"{platform}_layers"]
    lines = [
        f"[{TABLE}]  # what ./noxw -s build gives on this base; verify and check compare "
        "(docs/releases.md)"
    ]
    for key in order:
        if key not in table:
            continue
        value = table[key]
        if isinstance(value, list):
            lines += [f"{key} = ["] + [f'  "{v}",' for v in value] + ["]"]
        elif isinstance(value, (int, datetime.date)):
            lines.append(f"{key} = {value.isoformat() if hasattr(value, 'isoformat') else value}")
        else:
            lines.append(f'{key} = "{value}"')
    return "\n".join(lines) + "\n"


def with_table(toml_text: str, table: dict) -> str:
    """release.toml's text with [images] replaced or added before [locks], which stays the last
    table (pax.releases.compile rewrites it in place)."""
    text = re.sub(rf"(?ms)^\[{TABLE}\][^\n]*\n.*?(?=^\[(?!{TABLE}\])|\Z)", "", toml_text)
    head, sep, locks = text.partition("\n[locks]")
    return head.rstrip("\n") + "\n\n" + render(table) + (sep + locks if sep else "")


def against(target: Target, tag: str, log=sys.stderr) -> dict:
    """The built image `tag` against the release's record: {"recorded": ID, "agrees": True}, or
    {"recorded": None} when the release records none; ImageError naming why it differs."""
    version, platform = target.version, target.platform
    want = recorded(target.release)
    if platform not in want:
        hint = f"./noxw -s release -- {version} --record-images"
        print(f"pax images: release {version} records no {platform} image ID ({hint})", file=log)
        return {"recorded": None}
    facts = image_facts(tag)
    if facts["id"] == want[platform]:
        print(f"pax images: {tag} is the recorded image {want[platform]}", file=log)
        return {"recorded": want[platform], "agrees": True}
    builder = f"buildah {buildah.version()}"
    reasons = explain(want, platform, facts, base_facts(target.base_image), builder)
    reasons += _files_against_copy(want[platform], tag)
    raise ImageError(
        f"{tag} is {facts['id'][:19]}, release {version} records {want[platform][:19]}: "
        + "; ".join(reasons)
    )


def explain(want: dict, platform: str, facts: dict, base: dict, builder: str) -> list[str]:
    """Why a build (`facts`: image_facts) is not the recorded image, cheapest cause first:
    another base (a Debian point release, another package set), another recipe, another builder;
    then which layers differ."""
    reasons = []
    if base["base_id"] != want.get("base_id"):
        reasons.append(
            f"the base differs: {base['base_id'][:19]} ({_base_words(base)}) here, "
            f"{str(want.get('base_id'))[:19]} ({_base_words(want)}) recorded; to compare the "
            "rest, build on the recorded base (--base-image)"
        )
    recipe = want.get(f"{platform}_recipe_sha256")
    if facts["recipe"] != recipe:
        reasons.append(
            f"the recipe differs: sha256 {facts['recipe'][:12]} here, {str(recipe)[:12]} recorded "
            "(git log -- Dockerfile.tpu Dockerfile.gpu ci/verify_image_env.py pax/lockfile.py)"
        )
    if builder != want.get("builder"):
        reasons.append(f"the builder differs: {builder} here, {want.get('builder')} recorded")
    layers, recorded_layers = facts["layers"], want.get(f"{platform}_layers") or []
    if len(layers) != len(recorded_layers):
        reasons.append(f"{len(layers)} layers here, {len(recorded_layers)} recorded")
    differ = [str(n) for n, (a, b) in enumerate(zip(layers, recorded_layers), 1) if a != b]
    if differ:
        reasons.append(f"layers {', '.join(differ)} of {len(layers)} differ")
    elif len(layers) == len(recorded_layers):
        reasons.append("every layer is the recorded one, so the image config differs")
    return reasons


def _base_words(facts: dict) -> str:
    return (
        f"Debian {facts.get('base_debian_version')}, {facts.get('base_packages')} packages "
        f"sha256 {str(facts.get('base_packages_sha256'))[:12]}"
    )


def _files_against_copy(recorded_id: str, tag: str) -> list[str]:
    """Config fields, layers and files (diffoscope) against a copy of the recorded image, when
    the Docker engine holds one (an earlier build, or a pull from the registry)."""
    if not image_exists(recorded_id):
        return [
            f"no copy of {recorded_id[:19]} here to name the files (pull it from a registry "
            "that serves it, then verify again)"
        ]
    with tempfile.TemporaryDirectory(prefix="pax-record-") as tmp:
        layouts = []
        for name, ref in (("built", tag), ("recorded", recorded_id)):
            store_tag = f"localhost/pax-record:{name}"
            buildah.buildah("pull", "--quiet", f"docker-daemon:{ref}")
            buildah.buildah("tag", _store_id(ref), store_tag)
            layouts.append(buildah.save(store_tag, Path(tmp) / name))
            buildah.remove(store_tag)
        return [f"against the recorded image: {line}" for line in reproduce.compare(*layouts)]


def _store_id(ref: str) -> str:
    return docker("image", "inspect", "-f", "{{.Id}}", ref).stdout.strip().removeprefix("sha256:")
