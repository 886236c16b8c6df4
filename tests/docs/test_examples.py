"""The shell examples of README.md and docs/*.md (at least ten in README's quickstart): the ones a
fresh clone runs offline in seconds are run as written; every other one is parsed (its nox session, module or script exists, and so
do the pax.main flags and hyper-parameters it names), and one that uses the nightly lock shows
the step that makes it first."""

import importlib.util
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pax.experiments.config import PARAMS
from pax.paths import ROOT
from tests.docs.test_links import nox_sessions
from tests.helpers import xla_flags

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Programs of the user's machine an example may start with.
EXTERNAL = {
    "docker",
    "kubectl",
    "sbatch",
    "mkdir",
    "chmod",
    "cd",
    "taskset",
    "git",
    "rm",
    "openssl",
}
# Words of a shell loop around the commands (`for i in 0 1; do ...; done; wait`).
SHELL = {"for", "done", "wait"}
RELEASE = re.compile(r"\d+\.\d+\.\d+|nightly")
PLATFORMS = {"cpu", "tpu", "gpu"}
# nox sessions whose arguments after the release and platform are pax.main's flags.
PAX_MAIN_SESSIONS = {"train", "decode"}


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    command: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.command}"

    @property
    def words(self) -> list[str]:
        words = shlex.split(self.command)
        if words[:1] == ["do"]:
            words = words[1:]
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # VAR=value before a command
            words = words[1:]
        return words


def _split(line: str) -> list[str]:
    """The commands of one shell line: split at `&&` and `;` outside quotes."""
    parts, current, quote, i = [], "", None, 0
    while i < len(line):
        c = line[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == ";" or line.startswith("&&", i):
            parts.append(current)
            current, i = "", i + (2 if c == "&" else 1)
            continue
        current += c
        i += 1
    return [p.strip() for p in [*parts, current] if p.strip()]


def _comment_free(line: str) -> str:
    """`line` without a trailing `# comment` (a # inside quotes or a word is kept)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] == " "):
            return line[:i]
    return line


def examples() -> list[Example]:
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        inside, pending, start = False, "", 0
        for number, line in enumerate(lines, 1):
            if line.startswith("```"):
                inside = line.strip() == "```sh"
                continue
            if not inside:
                continue
            text = _comment_free(line).rstrip()
            if not pending:
                start = number
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            for command in _split(pending + text):
                found.append(Example(page, start, command))
            pending = ""
    return found


EXAMPLES = examples()


def _flags(words: list[str]) -> list[str]:
    """Problems with pax.main flags in `words` (flags, `--set KEY=VALUE`, placeholders kept)."""
    from absl import flags

    import pax.main  # noqa: F401  (defines the flags)

    known, problems, i = set(flags.FLAGS), [], 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--") or "..." in word:
            continue
        name, _, value = word[2:].partition("=")
        if name not in known and not (name.startswith("no") and name[2:] in known):
            problems.append(f"no pax.main flag --{name}")
        if name == "set":
            if not value and i < len(words):
                value, i = words[i], i + 1
            key = value.split("=", 1)[0]
            if key not in PARAMS and key != "KEY":
                problems.append(f"--set {key}: no such hyper-parameter")
    return problems


def check(example: Example) -> list[str]:
    """What is wrong with the example as a command line; [] when everything it names exists."""
    words = [w for w in example.words if not w.startswith("[")]
    if not words or words[0] in SHELL:
        return []
    program, problems = words[0], []
    if program == "./noxw":
        session = words[words.index("-s") + 1]
        if session not in nox_sessions():
            return [f"no nox session {session!r}"]
        args = words[words.index("--") + 1 :] if "--" in words else []
        if session in PAX_MAIN_SESSIONS:
            while args and (RELEASE.fullmatch(args[0]) or args[0] in PLATFORMS):
                args = args[1:]
            problems += _flags(args)
    elif program.endswith("python") or program == "docker":
        if "-m" in words:
            module = words[words.index("-m") + 1]
            if importlib.util.find_spec(module) is None:
                problems.append(f"no module {module!r}")
            if module == "pax.main":
                problems += _flags(words[words.index("-m") + 2 :])
        elif program == "docker" and "run" in words and "--entrypoint" not in words:
            image = next(i for i, w in enumerate(words) if w.startswith("pax:") or w == "IMAGE")
            problems += _flags(words[image + 1 :])  # the image's entry point is pax.main
        if program.endswith("python") and "/" in program and not program.startswith(".venv/"):
            if not (ROOT / program).exists() and program != ".tools/venv/bin/python":
                problems.append(f"no {program}")
    elif "/" in program:
        if not (ROOT / program).is_file():
            problems.append(f"no {program}")
    elif program not in EXTERNAL:
        problems.append(f"{program!r} is neither a session, a module, a script nor a known tool")
    return problems


def runs_offline_in_seconds(example: Example) -> bool:
    """Answers from a fresh clone's pinned CPU env, with no network, device or earlier run: the
    experiment list and descriptions, and `pax env`."""
    words = example.words
    if not words or not words[0].endswith("python") or words[0].startswith(".tools/"):
        return False
    if words[1:4] == ["-m", "pax", "env"]:
        return True
    return words[1:3] == ["-m", "pax.main"] and any(
        w == "--list_experiments" or w.startswith("--describe") for w in words
    )


RUN = [e for e in EXAMPLES if runs_offline_in_seconds(e)]


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_every_example_names_what_exists(example):
    assert not check(example), f"{example}: {'; '.join(check(example))}"


@pytest.mark.parametrize("example", RUN, ids=str)
def test_the_offline_examples_run_as_written(example, tmp_path, pax_main):
    # This env's Python stands for the one the example names (the newest release's pinned env).
    words = [sys.executable, *example.words[1:]]
    if words[1:3] == ["-m", "pax.main"]:
        result = pax_main.run(*words[3:], devices=8)
    else:
        result = subprocess.run(
            words, cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env(tmp_path)
        )
    assert result.returncode == 0, f"{example}\n{result.stderr[-3000:]}"
    assert result.stdout.strip()


def _env(tmp_path) -> dict:
    import os

    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(8),
    }


def test_nightly_is_locked_before_it_is_used():
    late = []
    for page in PAGES:
        locked = False
        for example in (e for e in EXAMPLES if e.page == page):
            words = example.words
            if words[:4] == ["./noxw", "-s", "lock", "--"] and "nightly" in words:
                locked = True
            elif any(w == "nightly" or "releases/nightly/" in w for w in words) and not locked:
                late.append(str(example))
    assert not late, "nightly used before `./noxw -s lock -- nightly`:\n" + "\n".join(late)


def test_the_count_of_examples_run_and_parsed(capsys):
    blocks = sum(len(re.findall(r"^```sh$", p.read_text(), re.M)) for p in PAGES)
    with capsys.disabled():
        print(
            f"\ndocs examples: {len(EXAMPLES)} commands in {blocks} shell blocks of "
            f"{len(PAGES)} pages; {len(RUN)} run here, {len(EXAMPLES) - len(RUN)} parsed only"
        )
    assert len(RUN) >= 3 and len(EXAMPLES) > 60


def quickstart_commands() -> list[str]:
    """Shell commands of README's code blocks from its start to its releases."""
    text = (ROOT / "README.md").read_text().split("## Releases")[0]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.split(r"\s#\s|^#", line)[0].strip()
            commands += [c.strip() for c in re.split(r"&&|;", line) if c.strip()]
    return commands


def test_quickstart_commands_name_what_exists():
    commands = quickstart_commands()
    assert len(commands) >= 10
    problems = {c: p for c in commands if (p := check(Example(ROOT / "README.md", 0, c)))}
    assert not problems, problems


# Options that name a file or folder an example writes.
WRITES = ("-o", "--out", "--output", "--json", "--keep")


def written(example: Example) -> list[str]:
    """The paths EXAMPLE writes that a clone would keep: relative ones outside runs/ (which git
    ignores), but for the committed figures it rewrites. Absolute paths, container paths,
    variables and placeholders are the reader's."""
    words, found = example.words, []
    for i, word in enumerate(words):
        name, _, value = word.partition("=")
        if name in WRITES:
            found.append(value or (words[i + 1] if i + 1 < len(words) else ""))
    return [
        path
        for path in found
        if path
        and not path.startswith(("runs/", "/", "$", "["))
        and not path.isupper()
        and not (ROOT / path).is_file()
    ]


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_examples_write_under_runs(example):
    assert not written(example), f"{example}: writes {written(example)} outside runs/"


def test_runs_is_ignored():
    ignored = subprocess.run(["git", "check-ignore", "-q", "runs/x.png"], cwd=ROOT)
    assert ignored.returncode == 0


@pytest.mark.parametrize(
    "command, problem",
    [
        ("./noxw -s trian", "no nox session 'trian'"),
        ("./noxw -s train -- 1.3.0 cpu --set=NUM_LAYER=2", "--set NUM_LAYER: no such"),
        ("./noxw -s decode -- --promt=hi", "no pax.main flag --promt"),
        ("python -m pax.mian", "no module 'pax.mian'"),
        ("docker run --rm -v $PWD/runs:/out pax:1.7.0-tpu --job_dir=/out/x", "flag --job_dir"),
        ("ci/nowhere.sh 1.7.0", "no ci/nowhere.sh"),
    ],
)
def test_the_parse_catches_what_does_not_exist(command, problem):
    assert problem in "; ".join(check(Example(ROOT / "README.md", 1, command)))
