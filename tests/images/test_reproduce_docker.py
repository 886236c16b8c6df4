"""Reproducible builds with buildah, on small images: the same steps give the same image ID, a
step that writes the time gives two, and the comparison names the file.

Needs buildah and diffoscope (ci/image-tools.sh) and the base image in buildah's store
(ci/base-image.sh), so it runs only with PAX_CONTAINER_TESTS=1, as CI's .ci/run sets it.
"""

import os

import pytest

from pax.images import buildah, reproduce
from pax.images.engine import ImageError

pytestmark = pytest.mark.skipif(
    os.environ.get("PAX_CONTAINER_TESTS") != "1",
    reason="image builds need buildah: set PAX_CONTAINER_TESTS=1 (after ci/image-tools.sh and "
    "ci/base-image.sh)",
)

RECIPE = """\
ARG BASE
FROM ${BASE}
ARG SOURCE_DATE_EPOCH
COPY payload.py /opt/app/payload.py
RUN python3 -m venv --without-pip /opt/venv \\
 && python3 -m compileall -q /opt/app \\
 && %s
"""


def _builder(tmp_path, last_step):
    (tmp_path / "payload.py").write_text("ANSWER = 42\n")
    (tmp_path / "Containerfile").write_text(RECIPE % last_step)
    base = buildah.base_id("pax-base:bookworm")
    args = {"BASE": base, "SOURCE_DATE_EPOCH": "1700000000"}

    def build_once(tag):
        image_id, _ = buildah.build(tmp_path, tmp_path / "Containerfile", tag, args, 1700000000)
        return image_id

    return build_once


def test_the_same_steps_give_the_same_image_id(tmp_path):
    result = reproduce.verify(_builder(tmp_path, "echo ok > /opt/app/done"))
    assert result["image_id"].startswith("sha256:") and len(result["build_seconds"]) == 2
    assert not buildah.image_id("localhost/pax-verify:a")  # the two builds are removed


def test_a_step_that_writes_the_time_is_named(tmp_path):
    with pytest.raises(ImageError) as e:
        reproduce.verify(_builder(tmp_path, "date +%N > /opt/app/built-at"))
    message = str(e.value)
    assert message.startswith("two builds gave sha256:")
    assert "opt/app/built-at" in message and "payload" not in message
