import pytest

from tests.bisect.wheels import build_index


@pytest.fixture(scope="session")
def index(tmp_path_factory):
    """tests/bisect/wheels.py's packages as a folder of wheels, with check.py beside it."""
    return build_index(tmp_path_factory.mktemp("index"))


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    """One wheel cache for the session: each bisect fetches only what it has not seen."""
    return tmp_path_factory.mktemp("wheel-cache")


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch):
    """Runs without --out or --cache write under $XDG_CACHE_HOME/pax: a test's own folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
