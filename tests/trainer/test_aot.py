"""Pax's 1B and 2B experiments compile for their real 4-device mesh, at real size, on CPU."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_reference_experiments_compile_at_full_size_and_fit(tmp_path):
  out = tmp_path / 'aot.json'
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  result = subprocess.run([sys.executable, '-m', 'pax.parallel.aot', 'C4Spmd1BAdam4Replicas',
                           'LmCloudSpmd2BLimitSteps', '--json', str(out)], cwd=ROOT,
                          env={**env, 'PYTHONPATH': ROOT}, capture_output=True, text=True,
                          timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  rows = {r['experiment'].rsplit('.', 1)[1]: r for r in json.loads(out.read_text())}
  # The names promise 1B and 2B parameters; counted abstractly, within 15%.
  assert rows['C4Spmd1BAdam4Replicas']['params'] == pytest.approx(1e9, rel=0.15)
  assert rows['LmCloudSpmd2BLimitSteps']['params'] == pytest.approx(2e9, rel=0.15)
  for r in rows.values():
    assert r['devices'] == 4 and r['mesh'] == {'replica': 1, 'data': 4, 'mdl': 1}
    assert 0 < r['per_device_bytes'] <= 32 * 2**30 and r['fits']


def test_pipeline_meshes_are_reported_not_crashed():
  result = subprocess.run([sys.executable, '-m', 'pax.parallel.aot',
                           'C4SpmdPipelineGpt3SmallAdam64Replicas'], cwd=ROOT,
                          env={**os.environ, 'PYTHONPATH': ROOT}, capture_output=True, text=True,
                          timeout=300)
  assert result.returncode == 1 and 'pipeline meshes' in result.stderr
