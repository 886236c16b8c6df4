"""pax.images without a Docker engine: argument errors, lock and wheelhouse checks."""

import dataclasses
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pax.images import cli, context, engine, paxwheel, publish, smoke, target, wheelhouse
from pax.paths import ROOT
from pax.releases import catalog


def _lock_text(entries):
    lines = []
    for name, version, digest in entries:
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{digest}\n    # via -r base.in")
    return "\n".join(lines) + "\n"


@pytest.fixture
def release_dir(tmp_path, monkeypatch):
    rel = tmp_path / "releases" / "9.0.0"
    rel.mkdir(parents=True)
    (rel / "release.toml").write_text('version = "9.0.0"\n')
    monkeypatch.setenv("PAX_RELEASES_DIR", str(tmp_path / "releases"))
    return rel


def _wheel(directory: Path, name: str, version: str, payload: bytes) -> str:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    path.write_bytes(payload)
    return hashlib.sha256(payload).hexdigest()


def test_unknown_release_and_platform(release_dir):
    with pytest.raises(
        engine.ImageError, match=r"unknown release '1\.2\.3'.*known releases: 9\.0\.0"
    ) as e:
        target.resolve("1.2.3", "tpu")
    assert e.value.usage
    with pytest.raises(engine.ImageError, match="unknown image platform 'cpu'.*tpu, gpu") as e:
        target.resolve("9.0.0", "cpu")
    assert e.value.usage
    with pytest.raises(engine.ImageError, match="has no tpu lockfile"):
        target.resolve("9.0.0", "tpu")


def test_frozen_lock_sha_is_enforced(release_dir):
    (release_dir / "tpu.txt").write_text(_lock_text([("absl-py", "2.1.0", "a" * 64)]))
    (release_dir / "release.toml").write_text(
        'version = "9.0.0"\n[locks]\ntpu = "' + "b" * 64 + '"\n'
    )
    with pytest.raises(engine.ImageError, match="releases are frozen"):
        target.resolve("9.0.0", "tpu")


def test_check_wheelhouse(tmp_path, release_dir):
    wh = tmp_path / "wh"
    wh.mkdir()
    a = _wheel(wh, "absl_py", "2.1.0", b"absl")
    b = _wheel(wh, "mdurl", "0.1.2", b"mdurl")
    lock = release_dir / "tpu.txt"
    lock.write_text(_lock_text([("absl-py", "2.1.0", a), ("mdurl", "0.1.2", b)]))
    wheelhouse.check_wheelhouse(lock, wh)  # exact match passes
    (wh / "mdurl-0.1.2-py3-none-any.whl").write_bytes(b"mdurl, tampered")
    with pytest.raises(engine.ImageError, match="wheel hash mismatch: mdurl-0.1.2"):
        wheelhouse.check_wheelhouse(lock, wh)
    (wh / "mdurl-0.1.2-py3-none-any.whl").unlink()
    with pytest.raises(engine.ImageError, match="lacks wheels for mdurl"):
        wheelhouse.check_wheelhouse(lock, wh)
    _wheel(wh, "mdurl", "0.1.2", b"mdurl")
    _wheel(wh, "extra_pkg", "1.0", b"x")
    with pytest.raises(engine.ImageError, match="not in .*extra-pkg"):
        wheelhouse.check_wheelhouse(lock, wh)


def test_a_staged_context_is_dated_by_the_source_not_the_checkout(tmp_path):
    """A checkout's file times (a fresh clone's are the clone's) must not reach the image: a
    timestamp .pyc compiled from a staged file records its time. The wheelhouse's hard links
    keep the user's times."""
    wh = tmp_path / "wh"
    wh.mkdir()
    wheel = wh / "absl_py-2.5.1-py3-none-any.whl"
    wheel.write_bytes(b"absl")
    os.utime(wheel, (1_800_000_000, 1_800_000_000))
    pax_wheel = tmp_path / "pax-1.7.0-py3-none-any.whl"
    pax_wheel.write_bytes(b"pax")
    ctx = tmp_path / "context"
    release = target.resolve("1.7.0", "tpu")
    release = dataclasses.replace(release, source=target.PaxSource("ab" * 20, False, 0))
    context.copy_inputs(release, wh, pax_wheel, ctx)
    epoch = 1_700_000_000
    context.date_context(ctx, epoch)
    staged = [p for p in ctx.rglob("*") if "wheelhouse" not in p.relative_to(ctx).parts]
    assert {"Dockerfile.tpu", "ci/verify_image_env.py", "ci/pax_lockfile.py"} <= {
        p.relative_to(ctx).as_posix() for p in staged
    }
    assert {p.stat().st_mtime for p in [ctx, *staged]} == {epoch}
    linked = ctx / "wheelhouse" / "1.7.0-tpu" / wheel.name
    assert linked.read_bytes() == b"absl" and wheel.stat().st_mtime == 1_800_000_000


def test_cli_one_line_usage_error(release_dir):
    r = subprocess.run(
        [sys.executable, "-m", "pax.images", "build", "7.7.7", "tpu"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "pax images: error: unknown release '7.7.7'; known releases: 9.0.0 (see releases/)"
    ]


def test_missing_engine_is_one_clear_line(release_dir, monkeypatch):
    (release_dir / "tpu.txt").write_text(_lock_text([("absl-py", "2.1.0", "a" * 64)]))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(engine.ImageError, match="no Docker engine answers"):
        engine.require_engine()
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(engine.ImageError, match="no docker command on PATH"):
        smoke.smoke(target.resolve("9.0.0", "tpu"))


def test_bad_registry_argument(release_dir):
    (release_dir / "tpu.txt").write_text(_lock_text([("absl-py", "2.1.0", "a" * 64)]))
    with pytest.raises(engine.ImageError, match="bad --registry"):
        publish.publish(target.resolve("9.0.0", "tpu"), "http://127.0.0.1:5000/")


def test_a_release_without_a_source_names_the_fix(release_dir):
    (release_dir / "tpu.txt").write_text(_lock_text([("absl-py", "2.1.0", "a" * 64)]))
    with pytest.raises(engine.ImageError, match="9.0.0 names no source commit.*--dev"):
        target.resolve("9.0.0", "tpu", with_source=True)
    (release_dir / "release.toml").write_text('version = "9.0.0"\nsource = "' + "e" * 40 + '"\n')
    with pytest.raises(engine.ImageError, match="source commit eeeeeeeeeeee is not in this clone"):
        target.resolve("9.0.0", "tpu", with_source=True)


def test_dev_tags_name_the_commit_and_a_changed_tree():
    assert target.PaxSource("ab" * 20, dev=False, epoch=0).tag_suffix == ""
    assert target.PaxSource("ab" * 20, dev=True, epoch=0).tag_suffix == "-dev.abababa"
    dirty = target.PaxSource("cd" * 20 + "-dirty", dev=True, epoch=0)
    assert dirty.tag_suffix == "-dev.cdcdcdc.dirty"


def test_a_release_wheel_is_its_source_tree_not_the_checkout(tmp_path):
    """1.4.0's source predates pax.envinfo and pax.images: its wheel has neither, whatever this
    checkout holds, carries its own lock, and is the same bytes when built again."""
    rel = catalog.resolve("1.4.0")
    release = target.resolve("1.4.0", "tpu", with_source=True)
    assert release.source.revision == rel.meta["source"] and not release.dev
    own = "pax/_releases/1.4.0/tpu.txt"
    first = paxwheel.build(tmp_path / "a", release)
    second = paxwheel.build(tmp_path / "b", release)
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as wheel:
        names = set(wheel.namelist())
        assert wheel.read(own) == rel.lockfile("tpu").read_bytes()
    assert "pax/main.py" in names and "pax/dist/images.py" in names
    assert "pax/envinfo.py" not in names and not any(n.startswith("pax/images/") for n in names)
    assert first.name == "pax-1.4.0-py3-none-any.whl"


def test_smoke_and_publish_take_dev_or_image_not_both(release_dir):
    with pytest.raises(engine.ImageError, match="--dev and --image name the image twice") as e:
        cli.run(["smoke", "9.0.0", "tpu", "--dev", "--image", "pax:x"])
    assert e.value.usage


def test_each_verify_builds_under_its_own_tags():
    """Two verifies at once on one machine keep to their own images in buildah's store."""
    from pax.images import reproduce

    first, second = reproduce.tags(), reproduce.tags()
    assert not set(first) & set(second)
    for a, b in (first, second):
        assert a.startswith("localhost/pax-verify-") and a.endswith(":a")
        assert b == a[:-1] + "b"


def _release(tmp_path, python) -> catalog.Release:
    return catalog.Release("9.9.9", tmp_path, {"python": python})


@pytest.mark.parametrize(
    "python, base",
    [("3.11", "pax-base:bookworm"), (["3.12", "3.13"], "pax-base:trixie")],
)
def test_an_image_stands_on_its_releases_base_unless_told_otherwise(tmp_path, python, base):
    lock = tmp_path / "tpu.txt"
    image = target.Target(_release(tmp_path, python), "tpu", lock, "0" * 64)
    assert image.base_image == base
    assert dataclasses.replace(image, base="python:3.13-slim-trixie").base_image == (
        "python:3.13-slim-trixie"
    )


def test_a_release_no_base_provides_is_refused_before_building(release_dir):
    (release_dir / "release.toml").write_text('version = "9.0.0"\npython = ["3.12"]\n')
    (release_dir / "tpu.txt").write_text(_lock_text([("absl-py", "2.1.0", "a" * 64)]))
    with pytest.raises(engine.ImageError, match=r"Python 3\.12, which no image base provides"):
        target.resolve("9.0.0", "tpu")


@pytest.mark.parametrize(
    "python, fetched",
    [
        ("3.11", "alpha-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"),
        # trixie's glibc 2.41 takes a wheel bookworm's 2.36 could not load
        (["3.12", "3.13"], "alpha-1.0-cp313-cp313-manylinux_2_39_x86_64.whl"),
    ],
)
def test_the_wheelhouse_is_fetched_for_the_images_python_and_glibc(tmp_path, python, fetched):
    from tests.bisect import wheels

    index = tmp_path / "index"
    index.mkdir()
    for tag in (
        "cp311-cp311-manylinux_2_17_x86_64",
        "cp313-cp313-manylinux_2_17_x86_64",
        "cp313-cp313-manylinux_2_39_x86_64",
        "cp312-cp312-manylinux_2_17_x86_64",
    ):
        wheels.build_wheel(index, "alpha", "1.0", tag=tag)
    hashes = " ".join(f"--hash=sha256:{wheels.sha256(w)}" for w in sorted(index.glob("*.whl")))
    lock = tmp_path / "tpu.txt"
    lock.write_text(f"--no-index\n--find-links {index}\n\nalpha==1.0 {hashes}\n")
    image = target.Target(_release(tmp_path, python), "tpu", lock, wheels.sha256(lock))
    dest = wheelhouse.prepare_wheelhouse(image, tmp_path / "wh", log=open(os.devnull, "w"))
    assert [w.name for w in dest.glob("*.whl")] == [fetched]


def test_each_base_suite_has_its_glibc():
    assert set(wheelhouse.GLIBC_MINOR) == set(catalog.BASE_SUITES)
    assert wheelhouse.wheel_platforms(41)[:2] == ["manylinux_2_41_x86_64", "manylinux_2_40_x86_64"]
    assert wheelhouse.wheel_platforms(36)[-4:] == [
        "manylinux_2_17_x86_64",
        "manylinux2014_x86_64",
        "manylinux2010_x86_64",
        "manylinux1_x86_64",
    ]
