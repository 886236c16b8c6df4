"""The switch that runs the image tests which need a Docker engine, buildah and the base image."""

import os

import pytest

# CI's .ci/run sets it after ci/docker-engine.sh start, ci/image-tools.sh and ci/base-image.sh.
needs_engine = pytest.mark.skipif(
    os.environ.get("PAX_CONTAINER_TESTS") != "1",
    reason="container tests need a Docker engine: set PAX_CONTAINER_TESTS=1 "
    "(after ci/docker-engine.sh start and ci/base-image.sh)",
)
