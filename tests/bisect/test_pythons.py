"""bisect across Pythons: GOOD's lock says Python 3.11, BAD's a newer one; the interpreter's move
is one more change, and can be the culprit.

Built from a real case: a reference run left its band between a 3.11 release and packages locked
for 3.13, and the cause was no package but the interpreter, whose pydoc_data.topics (which every
CPython release regenerates) the corpus was read from. The COMMAND here is that mechanism in
miniature. The toy jax 0.3 needs Python 3.12, as jax 0.12 does, so a candidate holding it on
GOOD's Python cannot be installed. Needs CPython 3.11.7 and a 3.12 or 3.13 (pyenv, PATH or uv).
"""

import sys
from argparse import Namespace

import pytest

from pax import interpreters
from pax.bisect import pythons as bisect_pythons
from pax.bisect.steps import InputError
from pax.releases import diff
from tests.bisect.test_bisect import culprit_names, run_bisect
from tests.bisect.wheels import write_lock

# sha256 of CPython 3.11.7's pydoc_data.topics, joined in sorted key order (pax/data/corpus.py
# keeps that text; tests/data/test_corpus.py checks it against the interpreter's own)
TOPICS_3_11_7 = "37d06970fc926e60c16dff401e441b84752446a36b6b64516c229fdec77e992c"
TOPICS_CHECK = (
    "import hashlib, sys; from pydoc_data import topics; "
    "text = ''.join(topics.topics[k] for k in sorted(topics.topics)); "
    "digest = hashlib.sha256(text.encode()).hexdigest(); "
    f"print('corpus', digest); sys.exit(digest != {TOPICS_3_11_7!r})"
)
GOOD = {"jax": "0.1", "jaxlib": "0.1", "z01": "1", "z02": "1"}
BAD = {"jax": "0.3", "jaxlib": "0.3", "z01": "2", "z02": "2"}  # z02 2 breaks check.py


@pytest.fixture(scope="module")
def newer():
    """The newer Python on this machine: 3.13, else 3.12."""
    if sys.version_info[:3] != (3, 11, 7):
        pytest.skip("GOOD's Python is CPython 3.11.7, whose pydoc topics the check knows")
    found = next((v for v in ("3.13", "3.12") if interpreters.find(v)), None)
    if found is None:
        pytest.skip("needs CPython 3.12 or 3.13 beside 3.11 (pyenv install 3.13)")
    return found


def _pythons(report) -> dict[str, set[str]]:
    """What each judgment was asked for -> the Pythons its candidates ran on."""
    pythons = {}
    for step in report["steps"]:
        pythons.setdefault(step["why"], set()).add(step["python"])
    return pythons


def test_the_interpreter_is_the_culprit(tmp_path, index, cache, newer, capsys):
    rc, report, text = run_bisect(
        tmp_path,
        index,
        cache,
        GOOD,
        BAD,
        command=["python", "-c", TOPICS_CHECK],
        pythons=("3.11", newer),
    )
    move = f"Python 3.11 -> {newer}"
    assert rc == 0, text
    assert [g["name"] for g in report["culprit"]] == [move] and report["confirmed"]
    assert report["culprit"][0]["python"] == {"good": "3.11", "bad": newer}
    assert report["python"]["good"] == "3.11" and report["python"]["bad"] == newer
    assert report["groups"][0]["name"] == move  # searched first
    assert report["alone"] == "bad"
    # BAD's packages on GOOD's Python: jax 0.3 has no wheel for 3.11, so that is skipped
    assert report["without"] == "skip"
    (skipped,) = report["skipped"]
    assert skipped["label"] == f"BAD without {move}"
    assert "requires Python >=3.12, not 3.11" in skipped["reason"]
    assert _pythons(report)["GOOD"] == {"3.11"} and _pythons(report)["BAD"] == {newer}
    assert f"  {move}   (the interpreter, not a package)" in text.splitlines()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == err[-1] == f"RESULT   culprit confirmed: {move}"


def test_a_package_is_the_culprit_across_pythons(tmp_path, index, cache, newer):
    rc, report, text = run_bisect(
        tmp_path, index, cache, GOOD, BAD, "--keep-env", pythons=("3.11", newer)
    )
    assert rc == 0, text
    assert culprit_names(report) == ["z02"] and report["confirmed"]
    assert (report["alone"], report["without"]) == ("bad", "good")
    pythons = _pythons(report)
    # the culprit alone goes on GOOD's Python, BAD without it on BAD's (the move applied)
    assert pythons["confirm: culprit alone on GOOD"] == {"3.11"}
    assert pythons["confirm: BAD without the culprit"] == {newer}
    assert pythons["search"] == {newer}  # the move comes first: every prefix searched holds it
    assert report["skipped"] == []
    assert "RESULT   culprit confirmed: z02 1 -> 2" in text
    # one working venv per Python, each made from its interpreter
    for version in ("3.11", newer):
        cfg = (tmp_path / "out" / f"env-python{version}" / "pyvenv.cfg").read_text()
        assert f"version = {version}." in cfg or f"version_info = {version}." in cfg, cfg


def test_a_python_not_found_is_one_line_before_any_env(tmp_path, index, cache, capsys):
    rc, report, _ = run_bisect(tmp_path, index, cache, GOOD, BAD, pythons=("3.11", "3.99"))
    assert rc == 2
    assert report["error"].startswith(f"--bad {tmp_path / 'bad.txt'} needs Python 3.99, and none")
    assert report["steps"] == [] and not list((tmp_path / "out").glob("env*"))
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pax bisect: error: {report['error']}"]


def _ends(good, bad, good_python=None, bad_python=None):
    args = Namespace(good=good, bad=bad, good_python=good_python, bad_python=bad_python)
    return bisect_pythons.resolve(diff.load(good), diff.load(bad), args)


def test_an_ends_python_is_its_flag_its_releases_or_its_lock_headers(tmp_path, index):
    headerless = write_lock(tmp_path / "plain.txt", {"z01": "1"}, index)
    assert diff.load("1.8.0").python == "3.11"  # pip-compile's header
    pythons = _ends("1.8.0", str(headerless))  # a lock that names none takes the other end's
    assert (pythons.good, pythons.bad, pythons.moved) == ("3.11", "3.11", False)
    with pytest.raises(InputError, match=r"^--bad-python 3\.13: release 1\.8\.0 installs on "):
        _ends(str(headerless), "1.8.0", bad_python="3.13")
