"""pax.bisect inside a pax image, offline, with wheels from a mounted folder.

Needs a Docker engine and this checkout's TPU image on a release's lock (`build --dev`, built
when missing), so it runs only with PAX_CONTAINER_TESTS=1, as test_images_docker.py does. Two runs, both `--network none`:

- the hermetic scenario of tests/bisect/wheels.py (a culprit among 11 groups, then --versions
  over its releases in the mounted folder);
- the image's own lock as GOOD (`--good image`, real jax from the release's wheelhouse) and
  BAD = that lock plus one tiny package that breaks COMMAND.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from pax.images import build, engine, target
from pax.images import wheelhouse as wheelhouse_lib
from pax.releases import catalog
from tests.bisect.wheels import build_index, build_wheel, sha256, write_lock

pytestmark = pytest.mark.skipif(
    os.environ.get("PAX_CONTAINER_TESTS") != "1",
    reason="container tests need a Docker engine: set PAX_CONTAINER_TESTS=1 "
    "(after ci/docker-engine.sh start and ci/base-image.sh)",
)

RELEASE = os.environ.get("PAX_CONTAINER_RELEASE") or catalog.newest().version
PLATFORM = "tpu"


@pytest.fixture(scope="module")
def image():
    engine.require_engine()
    dev = target.resolve(RELEASE, PLATFORM, dev=True)
    ref = dev.tag
    if not engine.image_exists(ref):
        build.build(dev)
    return ref


def _readable(path: Path, writable: bool = False) -> Path:
    """Tests write as the host user; the image runs as uid 1000."""
    for p in [path, *path.rglob("*")]:
        p.chmod((0o777 if writable else 0o755) if p.is_dir() else 0o644)
    return path


def _bisect(image: str, mounts: dict[str, Path], out: Path, *argv: str) -> dict:
    out.mkdir()
    _readable(out, writable=True)
    volumes = [f"-v{host}:{inside}:ro" for inside, host in mounts.items()]
    r = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            *volumes,
            f"-v{out}:/out",
            "--entrypoint",
            "python",
            image,
            "-m",
            "pax.bisect",
            "--out",
            "/out/run",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    report = out / "run" / "report.json"
    assert report.is_file(), r.stdout[-3000:] + r.stderr[-3000:]
    return {
        "rc": r.returncode,
        "stdout": r.stdout,
        "stderr": r.stderr,
        **json.loads(report.read_text()),
    }


def test_hermetic_scenario_in_the_image(image, tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    build_index(index)
    data = tmp_path / "data"
    data.mkdir()
    (data / "check.py").write_text((tmp_path / "check.py").read_text())
    good = {"vpkg": "1.0", **{f"p{i:02d}": "1.0" for i in range(10)}}
    bad = {"vpkg": "2.0", **{f"p{i:02d}": "1.1" for i in range(10)}}
    write_lock(data / "good.txt", good, index)
    write_lock(data / "bad.txt", bad, index)
    report = _bisect(
        image,
        {"/wheels": _readable(index), "/data": _readable(data)},
        tmp_path / "out",
        "--good",
        "/data/good.txt",
        "--bad",
        "/data/bad.txt",
        "--no-index",
        "--find-links",
        "/wheels",
        "--versions",
        "--",
        "python",
        "/data/check.py",
    )
    assert report["rc"] == 0, report["stdout"][-3000:] + report["stderr"][-3000:]
    assert [c["name"] for g in report["culprit"] for c in g["changes"]] == ["vpkg"]
    group_builds = report["env_builds"] - report["versions"]["env_builds"]
    assert group_builds <= 4 + 4  # ceil(log2 11) + 4
    walk = report["versions"]
    assert (walk["last_good"], walk["first_bad"]) == ("1.5", "1.6")
    assert set(walk["skipped"]) == {"1.3", "1.4"}
    assert "first bad release: vpkg 1.6" in report["stderr"]  # the report goes to stderr


def test_image_lock_as_good(image, tmp_path):
    wheelhouse = wheelhouse_lib.wheelhouse_dir(RELEASE, PLATFORM)
    release = target.resolve(RELEASE, PLATFORM)
    lock = release.lock
    try:
        wheelhouse_lib.check_wheelhouse(lock, wheelhouse)
    except engine.ImageError:
        wheelhouse_lib.prepare_wheelhouse(release)
    extra = tmp_path / "extra"
    extra.mkdir()
    breaker = build_wheel(extra, "breaker", "1.0")
    data = tmp_path / "data"
    data.mkdir()
    (data / "bad.txt").write_text(
        lock.read_text() + f"breaker==1.0 \\\n    --hash=sha256:{sha256(breaker)}\n"
    )
    check = (
        "import importlib.util, jax.numpy as jnp, pax.lockfile; "
        'print("sum", float(jnp.arange(4).sum())); '
        'raise SystemExit(importlib.util.find_spec("breaker") is not None)'
    )
    report = _bisect(
        image,
        {"/wheels": wheelhouse, "/extra": _readable(extra), "/data": _readable(data)},
        tmp_path / "out",
        "--good",
        "image",
        "--bad",
        "/data/bad.txt",
        "--no-index",
        "--find-links",
        "/wheels",
        "--find-links",
        "/extra",
        "--",
        "python",
        "-c",
        check,
    )
    assert report["rc"] == 0, report["stdout"][-3000:] + report["stderr"][-3000:]
    assert report["good"] == f"image {image} (/opt/pax/lock.txt)"
    assert [c["name"] for g in report["culprit"] for c in g["changes"]] == ["breaker"]
    # GOOD, BAD, BAD again (the culprit alone: same env), GOOD again (BAD without it)
    assert report["verdicts"] == 4 and report["env_builds"] == 3
    assert [b["kind"] for b in report["builds"]] == ["cold", "warm", "warm"]
    assert report["builds"][1]["installed"] == 1  # the warm step added only the breaker
    assert report["builds"][2]["removed"] == 1  # and the next took it out again
    assert "sum 6.0" in report["steps"][0]["output_tail"]
