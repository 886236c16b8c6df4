import pytest


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch):
    """Runs without --out or --cache write under $XDG_CACHE_HOME/pax: a test's own folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
