"""A band per platform: `<Experiment>.<platform>` shipped beside the CPU band `<Experiment>`,
and compare judging a run against the band of the platform it trained on."""

import json

import pytest

from pax.curves import cli, reference


@pytest.fixture
def shipped(tmp_path, monkeypatch, reference_file):
    """A references folder holding the tiny band twice: as the CPU band and as the TPU one."""
    folder = tmp_path / "references"
    folder.mkdir()
    data = json.loads(reference_file.read_text())
    for name in ("LmCloudSpmdTiny", "LmCloudSpmdTiny.tpu"):  # named as the recording names them
        (folder / f"{name}.json").write_text(json.dumps({**data, "name": name}))
    monkeypatch.setattr(reference, "REFERENCES_DIR", folder)
    return folder


def test_a_platforms_band_is_chosen_where_shipped_else_the_cpu_one(shipped):
    assert reference.reference_names() == ["LmCloudSpmdTiny", "LmCloudSpmdTiny.tpu"]
    assert (
        reference.reference_for("tasks.lm.params.x.LmCloudSpmdTiny", "tpu") == "LmCloudSpmdTiny.tpu"
    )
    assert reference.reference_for("tasks.lm.params.x.LmCloudSpmdTiny", "gpu") == "LmCloudSpmdTiny"
    assert reference.reference_for("tasks.lm.params.x.LmCloudSpmdTiny") == "LmCloudSpmdTiny"
    assert reference.reference_for("tasks.lm.params.x.Other", "tpu") is None
    assert (
        reference.shipped_name("tasks.lm.params.x.LmCloudSpmdTiny", "tpu") == "LmCloudSpmdTiny.tpu"
    )
    # By name, dotted experiment names included, each band loads.
    assert (
        reference.load_reference("LmCloudSpmdTiny.tpu").n
        == reference.load_reference("x.LmCloudSpmdTiny").n
    )


@pytest.mark.parametrize(
    "platform, band",
    [("tpu", "LmCloudSpmdTiny.tpu"), ("cpu", "LmCloudSpmdTiny"), ("gpu", "LmCloudSpmdTiny")],
)
def test_compare_says_which_band_judged_the_run(shipped, make_run, capsys, platform, band):
    run = make_run("run", seed=7, platform=platform)
    assert cli.main(["compare", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"with reference {band} (" in out
    # The band's own runs were synthetic CPU runs: a run on another platform is told so.
    assert ("other kernels, other rounding" in out) == (platform != "cpu")
