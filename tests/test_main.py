"""The entry point's bad-input contract: one line on stderr, exit 2, nothing written."""

import os
import subprocess

import pytest

TINY = "--exp=LmCloudSpmdTiny"


@pytest.mark.parametrize(
    "args, message",
    [
        (
            "--exp=LmCloudSpmdTinny",
            "unknown experiment 'LmCloudSpmdTinny'; closest: "
            "tasks.lm.params.lm_cloud.LmCloudSpmdTiny",
        ),
        ("--set=NUM_LAYER=2", "unknown hyper-parameter 'NUM_LAYER'"),
        ("--set=NUM_LAYERS=2.5", "bad value for NUM_LAYERS"),
        ("--set=ICI_MESH_SHAPE=[1,4,1]", "needs 4 devices but 1 cpu device(s) are available"),
        ("--exp=C4Spmd1BAdam4Replicas --set=ICI_MESH_SHAPE=[1,1,1]", "DATA_SOURCE=c4"),
        ("--mode=bake", "value should be one of"),
        (
            "--set=ACTIVATION=relu2",
            "bad value for ACTIVATION: 'relu2' is not one of relu, gelu, swiglu, geglu",
        ),
        # Attributes whose default is None are typed too.
        ("--set=DIMS_PER_HEAD=abc", "bad value for DIMS_PER_HEAD: 'abc' is not an int or None"),
        (
            "--set=TARGET_LOG_PPLX=low",
            "bad value for TARGET_LOG_PPLX: 'low' is not a float or None",
        ),
        ("--set=EVAL_NUM_BATCHES=0", "is below the minimum 1"),
        ("--set=MAX_SEQ_LEN=64", "Pax's MAX_SEQ_LEN is SEQ_LEN here"),
        ("--set=PER_CORE_BATCH_SIZE=8", "did you mean PERCORE_BATCH_SIZE"),
        ("--set=ICI_MESH_SHAPE=[1,-1,-1]", "at most one -1"),
        (
            "--set=NUM_HEADS=8 --set=DIMS_PER_HEAD=64",
            "NUM_HEADS=8 x DIMS_PER_HEAD=64 != MODEL_DIMS=256",
        ),
        (
            "--exp=C4SpmdPipelineGpt3SmallAdam64Replicas --set=NUM_MICROBATCHES=4",
            "exactly one of NUM_MICROBATCHES and MICROBATCH_SIZE",
        ),
        ("--set=NUM_KV_HEADS=3", "not a multiple of NUM_KV_HEADS=3"),
        ("--set=SEQ_LEN=1000000", "fewer than SEQ_LEN+1"),
        # Hints are quoted, so they paste into a shell as they are.
        ("--set=ICI_MESH_SHAPE=abc", "e.g. --set 'ICI_MESH_SHAPE=(1, -1, 1)'"),
        ("--set=ICI_MESH_SHAPE=[1,4,1]", "e.g. --set 'ICI_MESH_SHAPE=[1,-1,1]'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(pax_main, tmp_path, args, message):
    """ARGS are the experiment LmCloudSpmdTiny's unless they name another."""
    args = args.split() if "--exp=" in args else [TINY, *args.split()]
    job_dir = tmp_path / "job"
    result = pax_main.run(*args, f"--job_log_dir={job_dir}")
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pax: error: ") and message in lines[0], lines[0]
    assert not job_dir.exists()


def test_missing_job_log_dir(pax_main, tmp_path):
    result = pax_main.run(TINY)
    assert result.returncode == 2
    assert "--job_log_dir is required" in result.stderr


def test_list_experiments(pax_main):
    result = pax_main.run("--list_experiments")
    assert result.returncode == 0
    assert "tasks.lm.params.c4.C4Spmd1BAdam4Replicas" in result.stdout.split()
    line = next(ln for ln in result.stdout.splitlines() if "C4Spmd1BAdam4Replicas " in ln)
    assert "13 x 2560 (20 heads x 128, FFN 10240), seq 1024, vocab 32000, adam lr 0.001" in line


def test_describe_names_where_each_value_came_from(pax_main):
    result = pax_main.run("--describe=LmCloudSpmdTiny", "--set=NUM_LAYERS=3")
    assert result.returncode == 0, result.stderr
    rows = {ln.split()[0]: ln for ln in result.stdout.splitlines()[1:] if ln.startswith("  ")}
    assert rows["NUM_LAYERS"].split()[1:] == ["3", "--set"]
    assert rows["LEARNING_RATE"].split()[1:] == ["0.003", "class", "CpuSizedLm"]
    assert rows["DATA_SOURCE"].split()[1:] == ["'embedded'", "class", "LmCloudSpmdTiny"]
    assert rows["ACTIVATION"].split()[1:4] == ["'gelu'", "class", "LmCloudSpmd"]
    assert rows["COMBINE_QKV"].split()[1:] == ["True", "class", "TransformerLmSpmdAdafactor"]
    assert rows["FFN_HAS_BIAS"].split()[1:3] == ["True", "default"]
    assert "derived: MODEL_DIMS // NUM_HEADS" in rows["DIMS_PER_HEAD"]
    assert "[Pax: MAX_SEQ_LEN]" in rows["SEQ_LEN"]
    bad = pax_main.run("--describe=LmCloudSpmdTiny", "--set=DIMS_PER_HEAD=abc")
    assert bad.returncode == 2 and "DIMS_PER_HEAD" in bad.stderr


def test_eval_without_checkpoint_is_a_usage_error(pax_main, tmp_path):
    result = pax_main.run(TINY, "--mode=eval", f"--job_log_dir={tmp_path / 'job'}")
    assert result.returncode == 2
    assert "no complete checkpoint" in result.stderr
    assert not (tmp_path / "job").exists()


def test_a_weight_the_mesh_cannot_split_is_exit_2_naming_it_and_the_fix(pax_main, tmp_path):
    """GPT-3's vocabulary over a 4-way `mdl`: refused (jax places no uneven shards) rather than
    replicated on every device, before anything is written."""
    job_dir = tmp_path / "job"
    args = [TINY, "--set=VOCAB_SIZE=50257", "--set=ICI_MESH_SHAPE=[1,1,4]"]
    result = pax_main.run(*args, f"--job_log_dir={job_dir}", devices=4)
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        "pax: error: parameter params/embedding: dimension 0 (vocab, 50257) does not split over "
        "mesh axis `mdl` (4)"
    ), lines[0]
    assert "--set VOCAB_PAD_MULTIPLE=4" in lines[0]
    assert not job_dir.exists()


def test_a_file_in_place_of_the_job_dir_is_one_line(pax_main, tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    result = pax_main.run(TINY, f"--job_log_dir={tmp_path}/runs/tiny")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"pax: error: --job_log_dir={tmp_path}/runs/tiny: {tmp_path}/runs is a file, not a "
        "directory; choose another --job_log_dir"
    ]
    assert (tmp_path / "runs").read_text() == "not a folder"


@pytest.mark.parametrize("mode", ["train", "eval", "decode_once"])
def test_a_job_dir_that_cannot_hold_files_is_one_line_in_every_mode(pax_main, tmp_path, mode):
    """A kernel filesystem and a dangling symlink are named as what they are, whether the mode
    writes the job directory or only reads it."""
    (tmp_path / "runs").symlink_to(tmp_path / "gone")
    cases = [
        ("/proc/pax-run", " is on /proc, a kernel filesystem (proc) that cannot hold files; "
         "pass a --job_log_dir on a writable disk"),
        (f"{tmp_path}/runs/tiny", f": {tmp_path}/runs is a symlink to {tmp_path}/gone, which "
         "does not exist; create that folder, or choose another --job_log_dir"),
    ]  # fmt: skip
    for job_dir, message in cases:
        result = pax_main.run(TINY, f"--mode={mode}", f"--job_log_dir={job_dir}")
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [f"pax: error: --job_log_dir={job_dir}{message}"]
    assert os.listdir(tmp_path) == ["runs"]


@pytest.fixture
def read_only(tmp_path):
    """(a folder this user cannot write in, why): a read-only tmpfs for root (who may write
    anywhere else), a mode-555 folder for anyone else."""
    folder = tmp_path / "out"
    folder.mkdir()
    if os.getuid() != 0:
        folder.chmod(0o555)
        yield folder, "not writable"
        folder.chmod(0o755)
        return
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)]
    ).returncode:
        pytest.skip("mounting a read-only tmpfs failed")
    yield folder, "read-only"
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_an_unwritable_job_dir_is_one_line(pax_main, read_only):
    # As an image run with `-v DIR:/out` where the image's user cannot write DIR, or a
    # read-only mount.
    folder, why = read_only
    result = pax_main.run(TINY, f"--job_log_dir={folder}/tiny")
    assert result.returncode == 2, result.stderr
    uid = os.getuid()
    message = {
        "read-only": f"--job_log_dir={folder}/tiny is on {folder}, a read-only filesystem; pass "
        "a --job_log_dir on a writable disk",
        "not writable": f"cannot write the job directory {folder}/tiny: {folder} is not "
        f"writable by this user (uid {uid}); make it writable by uid {uid}, or choose another "
        "--job_log_dir",
    }[why]
    assert result.stderr.splitlines() == [f"pax: error: {message}"]
    assert os.listdir(folder) == []
