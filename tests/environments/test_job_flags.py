"""What nox's sessions take apart before running pax in a release env (pax.environments.job_flags,
pax.releases.catalog.pop_*, pax.releases.compile.lock_from_args, pax.images.cli.run_command)."""

import pytest

from pax.environments import job_flags
from pax.images import cli as images_cli
from pax.releases import catalog
from pax.releases import compile as locks


def test_defaults_fill_only_what_the_caller_did_not_give():
    assert job_flags.with_defaults(["--exp", "X", "--steps=3"], job_flags.TINY) == [
        "--job_log_dir=runs/tiny",
        "--exp",
        "X",
        "--steps=3",
    ]
    assert job_flags.with_defaults([], {"--a": "1"}) == ["--a=1"]


def test_flag_value_reads_both_spellings():
    assert job_flags.flag_value(["--job_log_dir=/a"], "--job_log_dir") == "/a"
    assert job_flags.flag_value(["--job_log_dir", "/b"], "--job_log_dir") == "/b"
    assert job_flags.flag_value(["--job_log_dir"], "--job_log_dir") is None


def test_job_report_names_metrics_or_their_absence(tmp_path):
    flags = ["--job_log_dir=job"]
    assert job_flags.job_report(flags, tmp_path) == [
        f"job dir: {tmp_path / 'job'}",
        f"metrics: {tmp_path / 'job' / 'metrics.jsonl (not written)'}",
    ]
    (tmp_path / "job" / "train").mkdir(parents=True)
    (tmp_path / "job" / "train" / "metrics.jsonl").write_text("{}\n")
    assert job_flags.job_report(flags, tmp_path)[1:] == [
        f"metrics: {tmp_path / 'job' / 'train' / 'metrics.jsonl'}"
    ]


def test_pop_release_and_platform():
    args = ["1.6.0", "tpu", "--x"]
    assert catalog.pop_release(args).version == "1.6.0"
    assert catalog.pop_platform(args) == "tpu" and args == ["--x"]
    args = ["--x"]
    assert catalog.pop_release(args) == catalog.newest() and args == ["--x"]
    assert catalog.pop_platform(args) == "cpu"
    with pytest.raises(catalog.UnknownRelease, match="9.9.9"):
        catalog.pop_release(["9.9.9"])


@pytest.mark.parametrize("word", ["tpux", "CPU", "gpu-x"])
def test_a_mistyped_platform_is_refused_before_the_release_is_looked_up(word):
    with pytest.raises(
        catalog.UnknownPlatform, match=rf"^unknown platform '{word}' \(cpu, tpu, gpu\)$"
    ):
        catalog.pop_release_and_platform(["9.9.9", word, "--x"])


def test_what_follows_the_platform_is_left_alone():
    # flags, and pytest's targets (paths that exist, node ids)
    for rest in (["--x"], ["tests"], ["tests/environments/test_job_flags.py::test_x"], ["-k", "y"]):
        args = ["1.6.0", *rest]
        assert catalog.pop_release_and_platform(args)[1] == "cpu" and args == rest
    args = ["tpu", "tests"]
    assert catalog.pop_release_and_platform(args) == (catalog.newest(), "tpu") and args == ["tests"]


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "^name a release"),
        (["1.6.0", "cpu", "arm"], "unknown lock.s. arm; locks: cpu, tpu, gpu, test"),
    ],
)
def test_lock_usage(args, message):
    with pytest.raises(locks.LockUsage, match=message):
        locks.lock_from_args(args)


@pytest.mark.parametrize("word", ["", "newest", "cpu"])
def test_lock_refuses_a_word_that_is_no_release(word, monkeypatch):
    """The release word is not optional to lock: an empty or mistyped one is refused, as diff
    and bisect refuse it, never read as the newest release."""
    monkeypatch.setattr(locks, "lock", lambda *a, **k: pytest.fail("lock() ran"))
    with pytest.raises(catalog.UnknownRelease, match=rf"^unknown release '{word}'; known"):
        locks.lock_from_args([word])


def test_image_commands_need_release_and_platform():
    with pytest.raises(images_cli.ImageError, match=r"^usage: ./noxw -s build -- R P") as e:
        images_cli.run_command("build", ["1.6.0", "--tag=x"], "R P")
    assert e.value.usage


@pytest.mark.parametrize(
    "args, platform, rest",
    [
        (["gpu", "C4Spmd1BAdam4Replicas"], "gpu", ["C4Spmd1BAdam4Replicas"]),
        (["tpu"], "tpu", []),
        (["C4Spmd1BAdam4Replicas", "--gpu=h100"], "gpu", ["C4Spmd1BAdam4Replicas", "--gpu=h100"]),
        (
            ["C4Spmd1BAdam4Replicas", "--gpu", "h200"],
            "gpu",
            ["C4Spmd1BAdam4Replicas", "--gpu", "h200"],
        ),
        (["--tpu", "v5e"], "tpu", ["--tpu", "v5e"]),
    ],
)
def test_aot_plans_in_the_env_of_the_platform_named(args, platform, rest):
    assert job_flags.pop_aot_platform(args) == platform and args == rest


def test_release_cuts_recording_its_images_or_records_a_release_cut_before(monkeypatch):
    ran, cut = [], []
    monkeypatch.setattr(images_cli, "run", lambda argv: ran.append(argv) or "recorded")

    def cut_from_args(args, root, log, record_images):
        cut.append(args)
        record_images(args[0], "pax-base:bookworm")

    monkeypatch.setattr(images_cli.release_cut, "cut_from_args", cut_from_args)
    assert images_cli.cut_or_record(["9.0.0", "--skip-tests"]) is None
    assert cut == [["9.0.0", "--skip-tests"]]
    assert ran == [["record", "9.0.0", "--base-image", "pax-base:bookworm"]]
    ran.clear()
    assert images_cli.cut_or_record(["1.6.0", "--record-images", "tpu"]) == "recorded"
    assert ran == [["record", "1.6.0", "tpu"]] and len(cut) == 1
