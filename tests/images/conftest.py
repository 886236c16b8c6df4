"""A Docker config of each test module's own, for the image tests that log in to a registry."""

import pytest


@pytest.fixture(scope="module")
def docker_config(tmp_path_factory):
    """A Docker config of the module's own, so logins never touch the user's."""
    path = tmp_path_factory.mktemp("docker-config")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOCKER_CONFIG", str(path))
        yield path
