"""`python -m pax env` run by a Python that is no pax env at all (the system's, as a reader may
first try it): it says so and where the envs are, instead of a table of every package."""

from pax import envinfo


def test_a_python_outside_every_env_is_told_where_the_envs_are(tmp_path):
    locks = envinfo.catalog()
    desc = envinfo.describe(environ={}, prefix=tmp_path, have={"absl-py": "0.1"}, locks=locks)
    lines = envinfo.render(desc).splitlines()
    newest = max({lock.release for lock in locks}, key=envinfo.version_key)
    assert lines[2] == "not a pax env: this Python has no pax-env.json and no release lock's set"
    assert "./noxw -s env -- [RELEASE] [PLATFORM]" in lines[3]
    assert f"pax-{newest}-cpu/bin/python -m pax env" in lines[3]
    assert lines[-1] == f"differences {len(desc['differences'])} (`--json` lists them)"
    assert not any(line.startswith("  package") for line in lines)


def test_a_drifted_pinned_env_still_lists_its_differences(tmp_path):
    lock = envinfo.catalog()[0]
    have = {**lock.versions, "absl-py": "0.0.1"}
    desc = envinfo.describe(environ={"PAX_LOCKFILE": lock.label}, prefix=tmp_path, have=have)
    text = envinfo.render(desc)
    assert "not a pax env" not in text and "  absl-py" in text
    # built from a lock by hand, without an identity, then one package bumped: still a pax env
    desc = envinfo.describe(environ={}, prefix=tmp_path, have=have)
    assert desc["state"] == "unpinned"
    text = envinfo.render(desc)
    assert "not a pax env" not in text and "  absl-py" in text


def test_without_release_locks_the_envs_are_a_checkouts():
    assert envinfo.where_envs_are(locks=()) == (
        "a release's env: ./noxw -s env -- RELEASE PLATFORM, in a checkout of pax"
    )
