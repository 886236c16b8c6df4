"""Every command run on its own answers a bad flag in one line, `PROG: error: ... (see
--help)`, and exit 2: no argparse usage block above it."""

import subprocess
import sys

import pytest

from pax.paths import ROOT

COMMANDS = [
    ("pax", "env"),
    ("pax.data", "sample", "--out", "x"),
    ("pax.aot",),
    ("pax.bisect.simulate",),
    ("pax.train.fp8_check",),
    ("pax.curves", "compare", "x"),
    ("benchmarks.bench",),
    ("benchmarks.tpu_bench",),
    ("benchmarks.gpu_bench",),
    ("benchmarks.decode",),
    ("benchmarks.c4_input",),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_a_bad_flag_is_one_line_and_exit_2(command):
    done = subprocess.run(
        [sys.executable, "-m", *command, "--no-such-flag"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("(see --help)"), done.stderr
    assert ": error: unrecognized arguments: --no-such-flag" in lines[0]
    assert not done.stdout
