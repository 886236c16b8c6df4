"""The wheel cache and the env builder over a folder of tiny wheels (no network).

What they must say when a wheel cannot be had, and at what cost: a hash mismatch or a missing
wheel among many pins takes a few pip calls, not one per pin.
"""

import shutil

import pytest

from pax.environments import wheelcache
from pax.environments.wheelcache import EnvBuilder, WheelCache
from pax.lockfile import Pin
from tests.bisect.wheels import build_wheel, sha256


def pin(folder, name, version, tag="py3-none-any", digest=None):
    wheel = folder / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    return Pin(name, version, (f"sha256:{digest or sha256(wheel)}",))


@pytest.fixture
def index(tmp_path):
    folder = tmp_path / "index"
    folder.mkdir()
    for i in range(12):
        build_wheel(folder, f"w{i:02d}", "1.0")
    build_wheel(folder, "old-only", "1.0", tag="py2-none-any")
    build_wheel(
        folder,
        "tool",
        "1.0",
        extra={
            "{dist}.dist-info/entry_points.txt": "[console_scripts]\nTool-Run = tool:main\n",
            "{dist}.data/scripts/tool-sh": "#!/bin/sh\n",
        },
    )
    return folder


def counting(cache):
    calls = []
    download = cache._download

    def counted(pins, dest, verify=True):
        calls.append(([p.name for p in pins], verify))
        return download(pins, dest, verify)

    cache._download = counted
    return calls


def test_hash_mismatch_names_file_and_both_hashes_in_few_pip_calls(tmp_path, index):
    pins = [pin(index, f"w{i:02d}", "1.0") for i in range(12)]
    pins[5] = pin(index, "w05", "1.0", digest="ab" * 32)
    cache = WheelCache(tmp_path / "cache", find_links=[str(index)], no_index=True, log=print)
    calls = counting(cache)
    (problem,) = cache.fetch(pins)
    assert problem.kind == "hash mismatch" and problem.pin == "w05==1.0"
    assert problem.file == "w05-1.0-py3-none-any.whl"
    assert problem.expected == ("sha256:" + "ab" * 32,)
    assert problem.actual == "sha256:" + sha256(index / "w05-1.0-py3-none-any.whl")
    assert problem.actual in problem.message and "ab" * 32 in problem.message
    # one verified batch, one unverified batch to find out which file did not match
    assert [verify for _, verify in calls] == [True, False]
    assert all(cache.path(p) is not None for p in pins if p is not pins[5])
    assert not list((tmp_path / "cache").glob(".incoming-*"))  # nothing left half-fetched
    assert cache.path(pins[5]) is None


def test_missing_wheels_are_named_one_pip_call_each(tmp_path, index):
    pins = [pin(index, f"w{i:02d}", "1.0") for i in range(12)]
    pins += [Pin("w03", "9.9", ()), pin(index, "old-only", "1.0", tag="py2-none-any")]
    cache = WheelCache(tmp_path / "cache", find_links=[str(index)], no_index=True, log=print)
    calls = counting(cache)
    problems = cache.fetch(pins)
    assert sorted(p.pin for p in problems) == ["old-only==1.0", "w03==9.9"]
    old_only = next(p for p in problems if p.pin == "old-only==1.0")
    assert old_only.message.startswith(
        f"no wheel of old-only==1.0 for this platform ({wheelcache.platform_label()}) on "
        f"--find-links {index}"
    )
    # two verified batches (w03 twice), then the unverified ones: pip names one missing pin per
    # failed call, which leaves the batch
    assert len(calls) <= 2 + 2 + 2


def test_one_version_pinned_with_other_hashes_by_good_and_bad(tmp_path, index):
    """A rebuild: GOOD's pin of w01 1.0 has a stale hash, BAD's the served file's."""
    good = pin(index, "w01", "1.0", digest="cd" * 32)
    bad = pin(index, "w01", "1.0")
    cache = WheelCache(tmp_path / "cache", find_links=[str(index)], no_index=True, log=print)
    (problem,) = cache.fetch([good, bad])
    assert problem.kind == "hash mismatch" and problem.expected == ("sha256:" + "cd" * 32,)
    assert cache.path(bad) is not None and cache.path(good) is None


def test_sources_that_do_not_answer(tmp_path, index):
    cache = WheelCache(tmp_path / "c1", find_links=[str(tmp_path / "nowhere")], no_index=True)
    (problem,) = cache.fetch([pin(index, "w00", "1.0")])
    assert problem.kind == "unreachable"
    assert problem.message == f"--find-links {tmp_path / 'nowhere'}: no such folder"
    cache = WheelCache(tmp_path / "c2", index_url="http://127.0.0.1:9/simple")
    (problem,) = cache.fetch([pin(index, "w00", "1.0")])
    assert problem.message.startswith("index http://127.0.0.1:9/simple is unreachable (")


def test_scripts_a_wheel_installs(tmp_path, index):
    cache = WheelCache(tmp_path / "cache", find_links=[str(index)], no_index=True)
    tool = pin(index, "tool", "1.0")
    assert cache.fetch([tool]) == []
    assert cache.scripts(tool) == {"Tool-Run", "tool-sh"}


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_install_failure_keeps_the_installers_error_line(tmp_path, index, installer):
    # fetched fine (pip download reads only the metadata), refused at install time
    build_wheel(index, "w99", "1.0", extra={"{dist}.data/nonsense/x": ""})
    good = pin(index, "w00", "1.0")
    cache = WheelCache(tmp_path / "cache", find_links=[str(index)], no_index=True)
    w99 = pin(index, "w99", "1.0")
    assert cache.fetch([good, w99]) == []
    builder = EnvBuilder(tmp_path / "env", cache, installer, log=print)
    first = builder.build({"w00": good})
    assert first.ok and first.kind == "cold"
    again = builder.build({"w00": good})  # nothing to change: no pip at all
    assert (again.ok, again.kind, again.installed) == (True, "reuse", 0)
    build = builder.build({"w00": good, "w99": w99})
    lead = {"pip": "ERROR: ", "uv": "error: Failed to install"}[installer]
    assert not build.ok and build.error.startswith(f"install failed: {lead}"), build.error
    assert "Processing" not in build.error and "Prepared" not in build.error  # progress lines


def test_a_wheel_pip_refuses_is_not_called_missing(tmp_path, index):
    (index / "w98-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    cache = WheelCache(tmp_path / "cache", find_links=[str(index)], no_index=True)
    (problem,) = cache.fetch([pin(index, "w98", "1.0"), pin(index, "w00", "1.0")])
    assert problem.kind == "unusable" and problem.pin == "w98==1.0"
    assert problem.message.startswith(f"w98==1.0: pip cannot fetch it from --find-links {index}")
    assert "ERROR:" in problem.message and "no wheel" not in problem.message


def test_a_wheel_for_another_python_is_not_taken_and_says_which_it_needs(tmp_path, index):
    # Requires-Python that leaves this interpreter out: pip refuses it, and a copy already in
    # the cache (fetched for another Python) is told by its metadata, without asking pip
    build_wheel(index, "w97", "1.0", requires=("w00",), metadata="Requires-Python: >=3.99\n")
    w97, w00 = pin(index, "w97", "1.0"), pin(index, "w00", "1.0")
    said = f"w97==1.0 requires Python >=3.99, not {wheelcache.platform_label().split()[1]}"
    cache = WheelCache(tmp_path / "cache", find_links=[str(index)], no_index=True)
    (problem,) = cache.fetch([w97, w00])
    assert (problem.kind, problem.message) == ("no wheel", said)
    shutil.copy(index / "w97-1.0-py3-none-any.whl", tmp_path / "cache")
    again = WheelCache(tmp_path / "cache", find_links=[str(index)], no_index=True)
    calls = counting(again)
    (problem,) = again.fetch([w97, w00])
    assert (problem.message, calls) == (said, [])
    assert again.path(w97) is None and again.requires(w97) == {"w00"}  # its metadata is read
