"""Every `./noxw -s` session exits with its command's own status and says why in one line
(pax.environments.sessions; the table in docs/troubleshooting.md#exit-status): each session is
started here with an input its command refuses, and nothing of nox's own failure lines follows."""

import ast
import contextlib
import os
import pty
import re
import signal
import subprocess
import sys

import pytest

from pax.environments import sessions
from pax.errors import CANNOT_JUDGE, FAILURE, USAGE, UsageError
from pax.images import cli as images_cli
from pax.paths import ROOT
from pax.releases import catalog
from tests.docs.test_links import nox_sessions

PREEMPTED = 75  # pax.train.preemption.EXIT_PREEMPTED (a trainer module: not imported here)
NEWEST = catalog.newest().version
UNKNOWN = "unknown release '9.9.9'"
# session -> (arguments, status, the one error line's start); RELEASE [PLATFORM] sessions get a
# mistyped platform after a release that is not cut, which must be refused before either is used.
CASES = {
    "test": (["9.9.9", "tpux"], USAGE, "test: error: unknown platform 'tpux' (cpu, tpu, gpu)"),
    "train": (["9.9.9", "tpux"], USAGE, "train: error: unknown platform 'tpux' (cpu, tpu, gpu)"),
    "decode": (["gpux"], USAGE, "decode: error: unknown platform 'gpux' (cpu, tpu, gpu)"),
    "env": (["9.9.9", "cpux"], USAGE, "env: error: unknown platform 'cpux' (cpu, tpu, gpu)"),
    "references": (["tpux"], USAGE, "references: error: unknown platform 'tpux'"),
    "lock": ([], USAGE, "lock: error: name a release"),
    "build": (["tpu"], USAGE, "build: error: usage: ./noxw -s build -- RELEASE"),
    "verify": (["tpu"], USAGE, "verify: error: usage: ./noxw -s verify -- RELEASE"),
    "smoke": (["tpu"], USAGE, "smoke: error: usage: ./noxw -s smoke -- RELEASE"),
    "publish": (["tpu"], USAGE, "publish: error: usage: ./noxw -s publish -- RELEASE"),
    "check": ([], USAGE, "check: error: usage: ./noxw -s check --"),
    "cluster": ([NEWEST, "tpu", "--exp=NoSuch"], USAGE, "pax cluster: error: unknown experiment"),
    "diff": (["9.9.9", NEWEST], USAGE, f"pax diff: error: {UNKNOWN}"),
    "bisect": ([], USAGE, "pax bisect: error: the following arguments are required"),
    "release": (["notaversion"], USAGE, "release: error: version must be X.Y.Z"),
    "readme": (["--chek"], USAGE, "readme: error: unexpected --chek"),
    "bench": (["9.9.9"], USAGE, f"bench: error: {UNKNOWN}"),
    "bench_c4": (["9.9.9"], USAGE, f"bench_c4: error: {UNKNOWN}"),
    "data": (["9.9.9"], USAGE, f"data: error: {UNKNOWN}"),
    "plot": ([], USAGE, "python -m pax.curves plot: error: the following arguments"),
    "compare": (["{tmp}/tiyn"], USAGE, "python -m pax.curves: error: "),
    "aot": (["9.9.9"], USAGE, f"aot: error: {UNKNOWN}"),
    "tutorial": (["9.9.9"], USAGE, f"tutorial: error: {UNKNOWN}"),
    "lint": (["--bogus"], USAGE, "lint: error: unexpected --bogus"),
}
# nox's own lines for a failed session, which would repeat the command or make every status 1.
NOX_FAILURE = re.compile(r"^nox > (Session .* (aborted|failed)|Command .* failed|.*: exit \d+$)")


def noxw(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "noxw"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_ends_with_one_line(result, status: int, line: str) -> None:
    lines = (result.stdout + result.stderr).splitlines()
    assert result.returncode == status, "\n".join(lines[-10:])
    assert [x for x in lines if ": error: " in x] == [lines[-1]], "\n".join(lines[-10:])
    assert lines[-1].startswith(line), lines[-1]
    assert not [x for x in lines if NOX_FAILURE.match(x)], "\n".join(lines)


def test_every_session_has_a_case():
    assert set(CASES) == nox_sessions()


def test_every_description_nox_lists_is_whole():
    """`./noxw -l` shows a docstring's first line: it is a sentence of its own."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    firsts = {
        node.name: ast.get_docstring(node).split("\n")[0]
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name in CASES
    } | {name: description for name, (description, _) in images_cli.SESSIONS.items()}
    cut = {
        name: line
        for name, line in firsts.items()
        if not line.endswith(".") or line.count("`") % 2 or line.count("(") != line.count(")")
    }
    assert len(firsts) == len(CASES) and not cut, cut


@pytest.mark.parametrize("session", sorted(CASES))
def test_a_session_exits_with_its_commands_status(session, tmp_path):
    args, status, line = CASES[session]
    venvs = sorted((ROOT / ".venv").glob("pax-*"))
    result = noxw("-s", session, "--", *(a.format(tmp=tmp_path) for a in args))
    assert_ends_with_one_line(result, status, line)
    assert sorted((ROOT / ".venv").glob("pax-*")) == venvs  # refused before any env was built


def test_an_unknown_session_is_one_line_exit_2():
    result = noxw("-s", "lint", "trian")
    assert_ends_with_one_line(result, USAGE, "noxw: error: unknown session 'trian' (did you mean")
    assert result.stderr.splitlines()[-1].endswith("tutorial, verify")  # every session named
    assert "nox >" not in result.stderr  # nothing ran, not even lint


def test_check_selected_names_the_first_unknown_session():
    sessions.check_selected(["test", "lint"], ["lint", "test"])
    with pytest.raises(UsageError, match=r"^unknown session 'lnit' \(did you mean lint\?\); "):
        sessions.check_selected(["test", "lnit"], ["lint", "test"])


def test_pytests_own_status_passes_through():
    # pytest says 4 for a usage error; nox would have made it 1
    result = noxw("-s", "test", "--", "--no-such-option")
    assert result.returncode == 4, result.stderr[-2000:]
    assert not [x for x in result.stderr.splitlines() if NOX_FAILURE.match(x)]


# Each starts the module in the newest release's cpu env (jax and the experiments import, about
# 10 s each on two cores), so it is in the full tier; the fast cases above cover the sessions.
@pytest.mark.slow
@pytest.mark.parametrize(
    "session, args, line",
    [
        ("train", ["--set=NO_SUCH=1"], "pax: error: "),
        ("decode", ["--promt=x"], "pax: error: Unknown command line flag 'promt'"),
        ("data", ["bogus"], "python -m pax.data: error: argument command: invalid choice"),
    ],
)
def test_a_module_in_an_env_exits_with_its_own_status(session, args, line):
    assert_ends_with_one_line(noxw("-s", session, "--", *args), USAGE, line)


@pytest.mark.parametrize("code", [FAILURE, USAGE, PREEMPTED, CANNOT_JUDGE])
def test_run_ends_with_the_commands_status_and_says_nothing(code, capfd):
    with pytest.raises(SystemExit) as ended:
        sessions.run([sys.executable, "-c", f"raise SystemExit({code})"])
    assert ended.value.code == code
    assert capfd.readouterr() == ("", "")


def test_run_logs_the_command_shell_quoted():
    logged = []
    sessions.run([sys.executable, "-c", "pass", "--prompt=two words"], log=logged.append)
    assert logged == [f"{sys.executable} -c pass '--prompt=two words'"]


def test_one_line_prints_the_error_and_exits_with_its_status(capsys):
    with pytest.raises(SystemExit) as ended, sessions.one_line("train"):
        raise catalog.UnknownPlatform("tpux")
    assert ended.value.code == USAGE
    assert capsys.readouterr().err == "train: error: unknown platform 'tpux' (cpu, tpu, gpu)\n"


def test_flags_names_what_a_session_does_not_take():
    assert sessions.flags(["--check"], {"--check"}, "readme -- [--check]") == {"--check"}
    with pytest.raises(UsageError, match=r"^unexpected --chek x; usage: readme -- \[--check\]$"):
        sessions.flags(["--chek", "x"], {"--check"}, "readme -- [--check]")


def _documented() -> dict[int, str]:
    """docs/troubleshooting.md's exit-status table: status -> its rows' `from` cells."""
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    table = page.split("## Exit status")[1].split("\n## ")[0]
    rows: dict[int, str] = {}
    for code, source in re.findall(r"^\| (\d+) \| ([^|]*) \|", table, re.M):
        rows[int(code)] = rows.get(int(code), "") + source
    return rows


def _literal_statuses() -> dict[int, list[str]]:
    """Every status pax, noxw and the noxfile write as a number: a `main`'s `return N`, an
    `exit_code` or `EXIT_*` of N, `sys.exit(N)`, `SystemExit(N)`; status -> where."""
    found: dict[int, list[str]] = {}

    def add(value, path, node):
        if type(value) is int:
            found.setdefault(value, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")

    for path in [*(ROOT / "pax").rglob("*.py"), ROOT / "noxw", ROOT / "noxfile.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in ("main", "exit_code"):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Constant):
                        add(inner.value.value, path, inner)
            elif (
                isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            ):
                if ast.unparse(node.func) in ("sys.exit", "SystemExit"):
                    add(node.args[0].value, path, node)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if any(n == "exit_code" or n.startswith("EXIT_") for n in names):
                    add(node.value.value, path, node)
    return found


def test_the_documented_table_lists_every_status():
    """Every status the code can end with is a row, and every row is a status something returns:
    pax.errors' classes, the numbers the commands write, pytest's (`test` passes them through)
    and nox's own for a selection that matches no session (an unknown name is caught first)."""
    documented = _documented()
    from_code = {code: ["pax.errors"] for code in (FAILURE, USAGE, CANNOT_JUDGE)}
    from_code.update(_literal_statuses())
    missing = {code: where for code, where in from_code.items() if code not in documented}
    assert not missing, f"statuses the code returns that the table lacks: {missing}"
    pytests = {int(code) for code in pytest.ExitCode}
    assert all("`test`" in documented.get(code, "") for code in pytests - {0})
    result = noxw("-k", "no_such_session_keyword")
    assert result.returncode == 3 and "./noxw" in documented[3], result.stderr[-500:]
    assert set(documented) == set(from_code) | pytests | {3}, "a row for a status nothing returns"


# A command that takes SIGINT and SIGTERM as pax.main does: it finishes what it is doing,
# says which signals it got, and exits 75.
COMMAND = """
import signal, sys, time
got = []
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda sig, _: got.append(signal.Signals(sig).name))
print("ready", flush=True)
while not got:
    time.sleep(0.01)
time.sleep(0.3)  # a second copy of the signal, if one comes, comes within this
print("got", *got, flush=True)
sys.exit(75)
"""
# The session's process: a nox session that runs the command through sessions.run.
SESSION = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from pax.environments import sessions
sessions.run([sys.executable, *sys.argv[1:]])
"""


def _group_is_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@contextlib.contextmanager
def _killed_at_the_end(pgid: int):
    """Whatever the test finds, nothing it started outlives it."""
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.parametrize(
    "send",
    [
        pytest.param(lambda pid: os.killpg(pid, signal.SIGINT), id="SIGINT-to-the-group"),
        pytest.param(lambda pid: os.kill(pid, signal.SIGINT), id="SIGINT-to-the-session"),
        pytest.param(lambda pid: os.kill(pid, signal.SIGTERM), id="SIGTERM-to-the-session"),
    ],
)
def test_a_signal_reaches_the_command_and_the_session_ends_with_its_status(send, tmp_path):
    """As a scheduler sends them: to the process group, or to the session's process alone."""
    (tmp_path / "command.py").write_text(COMMAND)
    session = subprocess.Popen(
        [sys.executable, "-c", SESSION, str(tmp_path / "command.py")],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    with _killed_at_the_end(session.pid):
        assert session.stdout.readline() == "ready\n"
        send(session.pid)
        said, _ = session.communicate(timeout=60)  # its end and the command's (stdout closed)
        assert session.returncode == PREEMPTED, said
        # The group's signal reaches the command directly and through the session: two copies.
        assert said.split()[:2] == ["got", "SIGTERM" if "TERM" in said else "SIGINT"], said
        assert _group_is_gone(session.pid)


def test_a_terminals_ctrl_c_reaches_the_command_once(tmp_path):
    """^C in a terminal: the kernel signals the foreground group, so the session passes on
    nothing more (a command that counts interrupts, like pytest, sees one)."""
    (tmp_path / "command.py").write_text(COMMAND)
    pid, terminal = pty.fork()  # the session on a terminal of its own, as in a shell
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-c", SESSION, str(tmp_path / "command.py")])
    with _killed_at_the_end(pid), open(terminal, "rb", buffering=0) as screen:
        said = b""
        while b"ready" not in said:
            said += screen.read(1024)
        screen_input = os.dup(terminal)
        os.write(screen_input, b"\x03")  # ^C, which the terminal turns into SIGINT
        os.close(screen_input)
        with contextlib.suppress(OSError):  # EIO once the session's side of it closes
            while chunk := screen.read(1024):
                said += chunk
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == PREEMPTED, said
        assert b"got SIGINT\r\n" in said, said
        assert _group_is_gone(pid)


def test_a_command_killed_by_a_signal_ends_the_session_with_128_plus_its_number():
    with pytest.raises(SystemExit) as ended:
        sessions.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 15)"])
    assert ended.value.code == 128 + signal.SIGTERM
