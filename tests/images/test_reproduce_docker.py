"""Reproducible builds with buildah, on small images: the same steps give the same image ID, a
step that writes the time gives two, and the comparison names the file.

Needs buildah and diffoscope (ci/image-tools.sh) and the base image in buildah's store
(ci/base-image.sh), so it runs only with PAX_CONTAINER_TESTS=1, as CI's .ci/run sets it.
"""

import pytest

from pax.images import buildah, reproduce
from pax.images.engine import ImageError
from tests.images.containers import needs_engine

pytestmark = needs_engine

RECIPE = """\
ARG BASE
FROM ${BASE}
ARG SOURCE_DATE_EPOCH
COPY payload.py /opt/app/payload.py
RUN python3 -m venv --without-pip /opt/venv \\
 && python3 -m compileall -q /opt/app \\
 && %s
"""


def _build_twice(tmp_path, last_step) -> list[str]:
    """The recipe built twice under one verify's tags, compared (ImageError when they differ),
    and removed from the store."""
    (tmp_path / "payload.py").write_text("ANSWER = 42\n")
    (tmp_path / "Containerfile").write_text(RECIPE % last_step)
    base = buildah.base_id("pax-base:bookworm")
    args = {"BASE": base, "SOURCE_DATE_EPOCH": "1700000000"}
    tagged = reproduce.tags()
    try:
        ids = [
            buildah.build(tmp_path, tmp_path / "Containerfile", tag, args, 1700000000)[0]
            for tag in tagged
        ]
        reproduce.compare_builds(ids, tagged)
    finally:
        buildah.remove(*tagged)
    return ids


def test_the_same_steps_give_the_same_image_id(tmp_path):
    ids = _build_twice(tmp_path, "echo ok > /opt/app/done")
    assert ids[0] == ids[1] and ids[0].startswith("sha256:")


def test_a_step_that_writes_the_time_is_named(tmp_path):
    with pytest.raises(ImageError) as e:
        _build_twice(tmp_path, "date +%N > /opt/app/built-at")
    message = str(e.value)
    assert message.startswith("two builds gave sha256:")
    assert "opt/app/built-at" in message and "payload" not in message
