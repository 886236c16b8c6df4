"""The environment manifest: enough to trace a curve back to the environment that made it.

The release and its lockfile come from PAX_RELEASE / PAX_LOCKFILE, which the nox sessions and
the images set when they install from a release lock; the lock's sha256 is recomputed here.
"""
import importlib.metadata
import os
import platform
import subprocess
import sys

from pax.dist.lockfile import sha256_file

HEADLINE_PACKAGES = ('jax', 'jaxlib', 'flax', 'optax', 'orbax-checkpoint', 'tensorstore', 'numpy')
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _git_revision():
  if os.environ.get('PAX_GIT_REVISION'):
    return os.environ['PAX_GIT_REVISION']
  if not os.path.isdir(os.path.join(_REPO_ROOT, '.git')):
    return None
  try:
    out = subprocess.run(['git', '-C', _REPO_ROOT, 'rev-parse', 'HEAD'], capture_output=True,
                         text=True, timeout=10, check=True).stdout.strip()
    dirty = subprocess.run(['git', '-C', _REPO_ROOT, 'status', '--porcelain', '--untracked-files=no'],
                           capture_output=True, text=True, timeout=10).stdout.strip()
    return out + ('-dirty' if dirty else '')
  except (OSError, subprocess.SubprocessError):
    return None


def release_info() -> dict:
  lockfile = os.environ.get('PAX_LOCKFILE')
  info = {'release': os.environ.get('PAX_RELEASE'), 'lockfile': lockfile, 'lock_sha256': None,
          'image': os.environ.get('PAX_IMAGE')}
  if lockfile and os.path.isfile(lockfile):
    info['lock_sha256'] = sha256_file(lockfile)
  return info


def environment(devices, mesh, peak: dict) -> dict:
  packages = {d.metadata['Name'].lower(): d.version for d in importlib.metadata.distributions()}
  return {
      **release_info(),
      'git_revision': _git_revision(),
      'python': sys.version.split()[0],
      'platform': platform.platform(),
      'headline_packages': {name: packages.get(name) for name in HEADLINE_PACKAGES},
      'packages': dict(sorted(packages.items())),
      'devices': {
          'platform': devices[0].platform,
          'device_kind': devices[0].device_kind,
          'count': len(devices),
          'process_count': len({d.process_index for d in devices}),
      },
      'mesh': dict(mesh.shape),
      'peak_flops': peak,
  }
