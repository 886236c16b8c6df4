"""Every command run on its own answers a bad flag in one line, `PROG: error: ... (see
--help)`, and exit 2: no argparse usage block above it."""

import importlib
import subprocess
import sys

import pytest

from pax.paths import ROOT

# (module whose main() `python -m` runs, the arguments before the bad flag)
COMMANDS = [
    ("pax.__main__", "env"),
    ("pax.data.cli", "sample", "--out", "x"),
    ("pax.data.cli",),  # before a subcommand: the flag is named, not the missing subcommand
    ("pax.data.cli", "sample"),  # and before a missing required option
    ("pax.aot",),
    ("pax.bisect.simulate",),
    ("pax.train.fp8_check",),
    ("pax.curves.cli", "compare", "x"),
    ("benchmarks.bench",),
    ("benchmarks.tpu_bench",),
    ("benchmarks.gpu_bench",),
    ("benchmarks.decode.__main__",),
    ("benchmarks.c4_input",),
]


def _one_error_line(stderr: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("(see --help)"), stderr
    assert ": error: unrecognized arguments: --no-such-flag" in lines[0]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_a_bad_flag_is_one_line_and_exit_2(command, capsys):
    module, *args = command
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as stop:
        main([*args, "--no-such-flag"])
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    _one_error_line(err)
    assert not out


# The whole process too, import-time output included, for the command most run and for the one
# that imports the most (jax's TPU pieces, the baseline).
@pytest.mark.parametrize("command", [("pax", "env"), ("benchmarks.tpu_bench",)], ids=" ".join)
def test_run_on_its_own_a_bad_flag_is_one_line_and_exit_2(command):
    done = subprocess.run(
        [sys.executable, "-m", *command, "--no-such-flag"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    _one_error_line(done.stderr)
    assert not done.stdout
