"""The MFU denominator on CPU: measured once per process, or given by PAX_CPU_PEAK_FLOPS."""

import os

import jax
import pytest

from pax.errors import UsageError
from pax.train import mfu

CPU = jax.devices("cpu")[:1]


def test_a_given_peak_is_taken_for_its_dtype_and_the_others_are_measured(monkeypatch):
    measured = []
    monkeypatch.setattr(mfu, "_host_matmul_peak", lambda dtype: measured.append(dtype) or 5e10)
    monkeypatch.setenv(mfu.GIVEN_PEAK, "float32=1.9e11")
    assert mfu.peak_flops(CPU, "float32") == {
        "flops": 1.9e11,
        "source": "given: PAX_CPU_PEAK_FLOPS",
        "device_kind": CPU[0].device_kind,
    }
    bf16 = mfu.peak_flops(CPU, "bfloat16")
    assert bf16["flops"] == 5e10 and bf16["source"].startswith("measured: best of 5 2048x2048")
    assert measured == ["bfloat16"]
    monkeypatch.delenv(mfu.GIVEN_PEAK)
    assert mfu.peak_flops(CPU, "float32")["source"].startswith("measured")


@pytest.mark.parametrize(
    "text, item",
    [
        ("fast", "'fast'"),
        ("float32=", "'float32='"),
        ("float32=1.9e11 float16=1e9", "'float16=1e9'"),
        ("float32=-1", "'float32=-1'"),
        ("float32=nan", "'float32=nan'"),
    ],
)
def test_a_mistyped_peak_is_one_line_naming_it(text, item):
    with pytest.raises(UsageError, match=f"^PAX_CPU_PEAK_FLOPS='{text}': {item} is not DTYPE"):
        mfu.given_peaks(text)


def test_pax_main_refuses_it_before_writing_anything(pax_main, tmp_path):
    job = tmp_path / "job"
    result = pax_main.run(
        "--exp=LmCloudSpmdTiny", f"--job_log_dir={job}", env={mfu.GIVEN_PEAK: "float32=fast"}
    )
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("pax: error: PAX_CPU_PEAK_FLOPS='float32=fast'"), last
    assert not os.path.exists(job)
