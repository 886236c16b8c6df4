"""Where compiled programs are kept between runs (pax.train.compile_cache)."""

import jax
import pytest

from pax.train import compile_cache


@pytest.fixture
def updates(monkeypatch):
    """The jax config changes enable makes, recorded instead of applied."""
    seen = {}
    monkeypatch.setattr(jax.config, "update", lambda name, value: seen.__setitem__(name, value))
    return seen


def test_an_accelerator_keeps_them_in_the_users_cache(updates):
    assert compile_cache.enable({}, backend="tpu") == str(compile_cache.DEFAULT)
    assert updates == {"jax_compilation_cache_dir": str(compile_cache.DEFAULT)}
    assert compile_cache.DEFAULT.parts[-3:] == (".cache", "pax", "xla")


def test_a_cpu_keeps_nothing_unless_asked(updates, tmp_path):
    assert compile_cache.enable({}, backend="cpu") is None and not updates
    assert compile_cache.enable({"PAX_COMPILATION_CACHE": str(tmp_path)}, "cpu") == str(tmp_path)
    assert updates == {"jax_compilation_cache_dir": str(tmp_path)}


def test_none_turns_it_off_and_jaxs_own_variable_is_left_to_jax(updates):
    assert compile_cache.enable({"PAX_COMPILATION_CACHE": "none"}, backend="gpu") is None
    theirs = {"JAX_COMPILATION_CACHE_DIR": "/jax/cache", "PAX_COMPILATION_CACHE": "/pax"}
    assert compile_cache.enable(theirs, backend="tpu") == "/jax/cache"
    assert not updates


def test_jax_writes_the_compiled_program_there(tmp_path):
    """The directory enable names is the one jax's persistent cache writes to."""
    import subprocess
    import sys

    code = (
        "import jax, jax.numpy as jnp\n"
        "from pax.train import compile_cache\n"
        f"compile_cache.enable({{'PAX_COMPILATION_CACHE': {str(tmp_path)!r}}})\n"
        "jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)\n"
        "print(jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.ones((64, 64))).sum())\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert any(p.is_file() for p in tmp_path.rglob("*"))
