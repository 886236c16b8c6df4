"""Host side of the container images: wheelhouse, build, smoke test, publish.

Stdlib only (runs in nox's tools venv, imports no jax). The image recipe is in
Dockerfile.tpu / Dockerfile.gpu; this module prepares what they consume and checks what
they produce:

  wheelhouse  pip download exactly the release's lockfile (hash-checked, binary only,
              for Linux x86_64 CPython 3.11) into wheelhouse/<release>-<platform>/
  build       pax wheel + staged build context -> `docker build --network none` under a
              temporary tag; `pax:<release>-<platform>` is tagged only when the build
              (including pip's hash check, pip check and the lock comparison) succeeded
  smoke       run the image offline on the tiny experiment and check the job directory
  publish     push to HOST:PORT, move latest-<platform>, pull back by digest, re-verify

    python -m pax.dist.images build 1.4.0 tpu
    python -m pax.dist.images smoke 1.4.0 tpu
    python -m pax.dist.images publish 1.4.0 tpu --registry 127.0.0.1:5000

Errors are one line (`pax images: error: ...`), exit 2 for usage errors, 1 otherwise.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Iterable, Optional

from pax.dist import lockfile
from pax.dist import release as dist_release
from pax.dist import venv as dist_venv

REPO_ROOT = Path(__file__).resolve().parents[2]
PLATFORMS = ('tpu', 'gpu')
IMAGE_REPO = os.environ.get('PAX_IMAGE_REPO', 'pax')
DEFAULT_BASE_IMAGE = 'pax-base:bookworm'
SMOKE_EXPERIMENT = 'tasks.lm.params.lm_cloud.LmCloudSpmdTiny'
SMOKE_STEPS = 20
# Linux x86_64, glibc 2.36 (bookworm, the base of both pax-base and python:3.11-slim-bookworm).
# pip does not expand a manylinux_2_N --platform to older tags, so every compatible tag is listed.
GLIBC_MINOR = 36
WHEEL_PLATFORMS = ([f'manylinux_2_{n}_x86_64' for n in range(GLIBC_MINOR, 16, -1)]
                   + ['manylinux2014_x86_64', 'manylinux2010_x86_64', 'manylinux1_x86_64'])
PYTHON_VERSION = '3.11'
LOCK_IN_IMAGE = '/opt/pax/lock.txt'
HASH_MISMATCH_MARKERS = ('DO NOT MATCH THE HASHES', 'THESE PACKAGES DO NOT MATCH')


class ImageError(Exception):
  """One-line failure; `usage` marks bad input (exit 2)."""

  def __init__(self, message: str, usage: bool = False):
    super().__init__(message)
    self.usage = usage


# --------------------------------------------------------------------------- releases, locks

def _repo_root() -> Path:
  """Where releases/ lives; PAX_RELEASES_DIR points elsewhere (tests)."""
  override = os.environ.get('PAX_RELEASES_DIR')
  return Path(override).parent if override else REPO_ROOT


def lock_path(release: str, platform: str) -> Path:
  """The release's lockfile for an image platform, or a one-line usage error."""
  if platform not in PLATFORMS:
    raise ImageError(f"unknown image platform {platform!r}: images exist for "
                     f"{', '.join(PLATFORMS)}", usage=True)
  try:
    rel = dist_release.resolve(release, _repo_root())
  except dist_release.UnknownRelease as e:
    raise ImageError(str(e), usage=True) from None
  except tomllib.TOMLDecodeError as e:
    raise ImageError(f'release {release}: release.toml: {e}') from None
  lock = rel.lockfile(platform)
  if not lock.is_file():
    raise ImageError(f'release {release} has no {platform} lockfile ({lock}); create it with '
                     f'./noxw -s lock -- {release}', usage=True)
  frozen, actual = rel.recorded_sha256(platform), sha256_file(lock)
  if frozen and frozen != actual:
    raise ImageError(f'{lock} has sha256 {actual[:12]}..., but {rel.dir}/release.toml '
                     f'records {frozen[:12]}...; restore the lockfile (releases are frozen)')
  return lock


sha256_file = lockfile.sha256_file
normalize = lockfile.canonicalize


def parse_lock(path: Path) -> dict[str, tuple[str, set[str]]]:
  """{canonical name: (version, {sha256 hex})} of a pip-compile --generate-hashes lockfile."""
  try:
    pins = lockfile.parse_lockfile(path)
  except lockfile.LockfileError as e:
    raise ImageError(str(e)) from None
  return {name: (pin.version, {h.split(':', 1)[1].lower() for h in pin.hashes
                               if h.lower().startswith('sha256:')})
          for name, pin in pins.items()}


# --------------------------------------------------------------------------- wheelhouse

def pip_python() -> str:
  """An interpreter with pip: this one, else the tools venv's (release envs hold no pip)."""
  candidates = [sys.executable, str(REPO_ROOT / '.tools' / 'venv' / 'bin' / 'python'),
                shutil.which('python3.11'), shutil.which('python3')]
  for python in filter(None, candidates):
    if not Path(python).exists():
      continue
    r = subprocess.run([python, '-m', 'pip', '--version'], capture_output=True, text=True,
                       env=dist_venv.pip_env())
    if r.returncode == 0 and ' (python 3.11)' in r.stdout:
      return python
  raise ImageError('no Python 3.11 with pip found (tried this interpreter, .tools/venv, '
                   'python3.11, python3); run ./noxw -l once to create .tools/venv')


def wheelhouse_dir(release: str, platform: str) -> Path:
  base = Path(os.environ.get('PAX_WHEELHOUSE', REPO_ROOT / 'wheelhouse'))
  return base / f'{release}-{platform}'


def _wheel_name(filename: str) -> str:
  return normalize(filename.split('-', 1)[0])


def check_wheelhouse(lock: Path, wheelhouse: Path) -> None:
  """Every lock entry has exactly one wheel here whose sha256 the lock lists, and nothing else."""
  entries = parse_lock(lock)
  wheels = sorted(wheelhouse.glob('*.whl')) if wheelhouse.is_dir() else []
  by_name: dict[str, list[Path]] = {}
  for w in wheels:
    by_name.setdefault(_wheel_name(w.name), []).append(w)
  missing = sorted(set(entries) - set(by_name))
  if missing:
    raise ImageError(f'wheelhouse {wheelhouse} lacks wheels for {", ".join(missing)}; '
                     f'rerun the wheelhouse step')
  extra = sorted(set(by_name) - set(entries))
  if extra:
    raise ImageError(f'wheelhouse {wheelhouse} holds wheels not in {lock}: {", ".join(extra)}; '
                     f'delete the directory and rerun the wheelhouse step')
  for name, files in by_name.items():
    _, digests = entries[name]
    if len(files) != 1:
      raise ImageError(f'wheelhouse {wheelhouse} holds {len(files)} wheels for {name}; '
                       f'delete the directory and rerun the wheelhouse step')
    got = sha256_file(files[0])
    if got not in digests:
      raise ImageError(f'wheel hash mismatch: {files[0].name} has sha256 {got[:16]}..., not a hash '
                       f'listed in {lock}; the wheelhouse is tampered or corrupt: delete '
                       f'{wheelhouse} and rerun')


def prepare_wheelhouse(release: str, platform: str, dest: Optional[Path] = None,
                       log=sys.stderr) -> Path:
  """pip download the lock's wheels (hash-checked) for the image's interpreter and platform."""
  lock = lock_path(release, platform)
  dest = Path(dest) if dest else wheelhouse_dir(release, platform)
  dest.mkdir(parents=True, exist_ok=True)
  cmd = [pip_python(), '-m', 'pip', 'download', '--only-binary=:all:', '--no-deps',
         '--require-hashes', '-r', str(lock), '-d', str(dest),
         '--python-version', PYTHON_VERSION, '--implementation', 'cp', '--abi', 'cp311',
         '--abi', 'abi3', '--abi', 'none', '--progress-bar', 'off']
  for tag in WHEEL_PLATFORMS:
    cmd += ['--platform', tag]
  print(f'pax images: downloading {release}-{platform} wheels into {dest}', file=log)
  r = subprocess.run(cmd, env=dist_venv.pip_env(), capture_output=True, text=True)
  if r.returncode != 0:
    out = r.stdout + r.stderr
    if any(m in out for m in HASH_MISMATCH_MARKERS):
      raise ImageError(f'wheel hash mismatch while downloading {lock}: a file in {dest} or '
                       f'from the index does not match the lock; delete {dest} and rerun')
    last = [l for l in out.strip().splitlines() if l.strip()][-1:] or ['(no output)']
    raise ImageError(f'pip download for {lock} failed: {last[0].strip()}')
  check_wheelhouse(lock, dest)
  return dest


def build_pax_wheel(dest: Path) -> Path:
  """The pax wheel, built from this checkout (no dependencies)."""
  dest.mkdir(parents=True, exist_ok=True)
  for old in dest.glob('pax-*.whl'):
    old.unlink()
  with tempfile.TemporaryDirectory(prefix='pax-wheel-') as tmp:
    # Copy the tracked sources so a stale build/ or egg-info cannot leak into the wheel.
    src = Path(tmp) / 'src'
    files = _git(['ls-files', '--cached', '--others', '--exclude-standard'], check=False)
    if files is None:
      shutil.copytree(REPO_ROOT, src, ignore=shutil.ignore_patterns(
          '.git', '.nox', '.venv', '.tools', 'wheelhouse', 'build', 'dist', '*.egg-info'))
    else:
      for rel in files.splitlines():
        if not (rel.startswith('pax/') or rel in ('pyproject.toml', 'README.md', 'LICENSE')):
          continue
        if not (REPO_ROOT / rel).is_file():
          continue
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, src / rel)
      if not (src / 'README.md').exists():
        (src / 'README.md').write_text('Pax\n')
    # Same sources, same wheel bytes (zip timestamps from SOURCE_DATE_EPOCH), so an unchanged
    # trainer keeps the image's pax layer cached.
    env = {**dist_venv.pip_env(), 'SOURCE_DATE_EPOCH': (_git(['log', '-1', '--format=%ct'], check=False)
                                                    or '315532800').strip()}
    r = subprocess.run([pip_python(), '-m', 'pip', 'wheel', '--no-deps', '-q', '-w', str(dest),
                        str(src)], env=env, capture_output=True, text=True)
    if r.returncode != 0:
      last = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()][-1:] or ['']
      raise ImageError(f'building the pax wheel failed: {last[0].strip()}')
  wheels = sorted(dest.glob('pax-*.whl'))
  if len(wheels) != 1:
    raise ImageError(f'expected one pax wheel in {dest}, found {len(wheels)}')
  return wheels[0]


def _git(args: list[str], check: bool = True) -> Optional[str]:
  try:
    r = subprocess.run(['git', '-C', str(REPO_ROOT), *args], capture_output=True, text=True)
  except FileNotFoundError:
    return None
  if r.returncode != 0:
    if check:
      raise ImageError(f'git {" ".join(args)} failed: {r.stderr.strip()}')
    return None
  return r.stdout


def revision() -> str:
  rev = (_git(['rev-parse', 'HEAD'], check=False) or 'unknown').strip()
  dirty = _git(['status', '--porcelain', '--untracked-files=no'], check=False)
  return rev + ('-dirty' if dirty else '')


# --------------------------------------------------------------------------- docker

def docker(*args: str, check: bool = True, capture: bool = True,
           timeout: Optional[float] = None) -> subprocess.CompletedProcess:
  try:
    r = subprocess.run(['docker', *args], capture_output=capture, text=True, timeout=timeout)
  except FileNotFoundError:
    raise ImageError('no docker command on PATH; install a Docker engine or run '
                     'ci/docker-engine.sh start') from None
  if check and r.returncode != 0:
    msg = (r.stderr or r.stdout or '').strip().splitlines()
    raise ImageError(f'docker {args[0]} failed: {msg[-1] if msg else "exit " + str(r.returncode)}')
  return r


def require_engine() -> None:
  r = docker('info', '--format', '{{.ServerVersion}}', check=False)
  if r.returncode != 0 or not r.stdout.strip():
    raise ImageError('no Docker engine answers (docker info failed); start one with '
                     'ci/docker-engine.sh start')


def image_exists(ref: str) -> bool:
  return docker('image', 'inspect', ref, check=False).returncode == 0


def image_ref(release: str, platform: str) -> str:
  return f'{IMAGE_REPO}:{release}-{platform}'


def stage_context(release: str, platform: str, wheelhouse: Path, pax_wheel: Path,
                  ctx: Path) -> None:
  """A minimal build context: Dockerfile, the lock, the wheels (hard links when possible)."""
  lock = lock_path(release, platform)
  (ctx / 'releases' / release).mkdir(parents=True)
  shutil.copy2(lock, ctx / 'releases' / release / f'{platform}.txt')
  shutil.copy2(REPO_ROOT / f'Dockerfile.{platform}', ctx / f'Dockerfile.{platform}')
  (ctx / 'ci').mkdir()
  shutil.copy2(REPO_ROOT / 'ci' / 'verify_image_env.py', ctx / 'ci' / 'verify_image_env.py')
  wh = ctx / 'wheelhouse' / f'{release}-{platform}'
  wh.mkdir(parents=True)
  for w in wheelhouse.glob('*.whl'):
    try:
      os.link(w, wh / w.name)
    except OSError:
      shutil.copy2(w, wh / w.name)
  (ctx / 'dist').mkdir()
  shutil.copy2(pax_wheel, ctx / 'dist' / pax_wheel.name)


def build(release: str, platform: str, base_image: str = DEFAULT_BASE_IMAGE,
          tag: Optional[str] = None, wheelhouse: Optional[Path] = None,
          check_hashes: bool = True, log=sys.stderr) -> str:
  """Build the image; returns its tag. Only a successful build is tagged with the release's name."""
  lock = lock_path(release, platform)
  require_engine()
  if not image_exists(base_image):
    hint = ('build it with ci/base-image.sh' if base_image == DEFAULT_BASE_IMAGE
            else f'docker pull {base_image}')
    raise ImageError(f'base image {base_image} is not present locally; {hint}')
  default_wheelhouse = wheelhouse is None
  wheelhouse = Path(wheelhouse) if wheelhouse else wheelhouse_dir(release, platform)
  if check_hashes:
    try:
      check_wheelhouse(lock, wheelhouse)  # offline when the wheelhouse is complete
    except ImageError as e:
      if not (default_wheelhouse and 'lacks wheels' in str(e)):
        raise
      prepare_wheelhouse(release, platform, wheelhouse, log=log)  # fetch what is missing
  tag = tag or image_ref(release, platform)
  lock_sha = sha256_file(lock)
  tmp_tag = f'{IMAGE_REPO}-build:{release}-{platform}-{uuid.uuid4().hex[:12]}'
  created = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')
  with tempfile.TemporaryDirectory(prefix='pax-ctx-') as tmp:
    ctx = Path(tmp)
    pax_wheel = build_pax_wheel(ctx / 'paxwheel')
    stage_context(release, platform, wheelhouse, pax_wheel, ctx / 'context')
    cmd = ['build', '--network', 'none', '--pull=false', '--force-rm', '-f',
           str(ctx / 'context' / f'Dockerfile.{platform}'), '-t', tmp_tag,
           '--build-arg', f'RELEASE={release}', '--build-arg', f'BASE_IMAGE={base_image}',
           '--build-arg', f'LOCK_SHA256={lock_sha}', '--build-arg', f'REVISION={revision()}',
           '--build-arg', f'CREATED={created}', str(ctx / 'context')]
    print(f'pax images: docker build {tag} (from {base_image}, lock sha256 {lock_sha[:12]})',
          file=log)
    t0 = time.monotonic()
    r = docker(*cmd, check=False, capture=True)
    (ctx / 'build.log').write_text(r.stdout + r.stderr)
    if r.returncode != 0:
      if image_exists(tmp_tag):
        docker('rmi', tmp_tag, check=False)
      out = r.stdout + r.stderr
      saved = _save_log(out, release, platform)
      if any(m in out for m in HASH_MISMATCH_MARKERS):
        raise ImageError(f'wheel hash mismatch: pip refused a wheel in {wheelhouse} that does not '
                         f'match {lock} (tampered or corrupt wheelhouse); delete it and rerun; '
                         f'no image tagged; log {saved}')
      errs = [l for l in out.splitlines() if 'pax-verify' in l or 'ERROR' in l or 'error' in l]
      tail = (errs or [l for l in out.splitlines() if l.strip()] or ['(no output)'])[-1].strip()
      raise ImageError(f'docker build of {tag} failed: {tail}; no image tagged; log {saved}')
  docker('tag', tmp_tag, tag)
  docker('rmi', tmp_tag, check=False)
  saved = _save_log(r.stdout + r.stderr, release, platform)
  size = docker('image', 'inspect', '-f', '{{.Size}}', tag).stdout.strip()
  print(f'pax images: built {tag} in {time.monotonic() - t0:.0f}s, '
        f'{int(size) / 1e6:.0f} MB (log {saved})', file=log)
  return tag


def _save_log(text: str, release: str, platform: str) -> Path:
  d = Path(tempfile.gettempdir()) / 'pax-build-logs'
  d.mkdir(exist_ok=True)
  p = d / f'{release}-{platform}-{int(time.time())}.log'
  p.write_text(text)
  return p


# --------------------------------------------------------------------------- smoke

def verify_in_image(image: str) -> str:
  """Run the image's own environment check (installed set == baked-in lock)."""
  r = docker('run', '--rm', '--network', 'none', '--entrypoint', 'python', image,
             '/opt/pax/verify_image_env.py', check=False)
  if r.returncode != 0:
    lines = (r.stdout + r.stderr).strip().splitlines()
    raise ImageError(f'in-image verification of {image} failed: {lines[-1] if lines else ""}')
  return r.stdout.strip()


def _strings(obj) -> Iterable[str]:
  if isinstance(obj, str):
    yield obj
  elif isinstance(obj, dict):
    for k, v in obj.items():
      yield str(k)
      yield from _strings(v)
  elif isinstance(obj, (list, tuple)):
    for v in obj:
      yield from _strings(v)


def check_job_dir(job: Path, release: str, lock_sha: str) -> dict:
  """Checkpoint written, loss falling, manifest naming the release and the lock's sha256."""
  ckpts = job / 'checkpoints'
  steps = sorted(p.name for p in ckpts.iterdir()) if ckpts.is_dir() else []
  if not steps:
    raise ImageError(f'smoke: no checkpoint under {ckpts}')
  metrics_file = job / 'metrics.jsonl'
  if not metrics_file.is_file():
    raise ImageError(f'smoke: no {metrics_file}')
  losses = []
  for line in metrics_file.read_text().splitlines():
    if not line.strip():
      continue
    rec = json.loads(line)
    if rec.get('split', 'train') != 'train':
      continue
    for key in ('loss', 'train/loss', 'train_loss'):
      if isinstance(rec.get(key), (int, float)):
        losses.append(float(rec[key]))
        break
  if len(losses) < 2:
    raise ImageError(f'smoke: {metrics_file} has {len(losses)} loss values; need at least 2')
  if not losses[-1] < losses[0]:
    raise ImageError(f'smoke: loss did not fall ({losses[0]:.4f} -> {losses[-1]:.4f})')
  manifest_file = job / 'manifest.json'
  if not manifest_file.is_file():
    raise ImageError(f'smoke: no {manifest_file}')
  strings = set(_strings(json.loads(manifest_file.read_text())))
  if release not in strings:
    raise ImageError(f'smoke: {manifest_file} does not name release {release}')
  if not any(lock_sha in s for s in strings):
    raise ImageError(f'smoke: {manifest_file} does not name lock sha256 {lock_sha[:12]}...')
  return {'checkpoints': steps, 'first_loss': losses[0], 'last_loss': losses[-1]}


def smoke(release: str, platform: str, image: Optional[str] = None, steps: int = SMOKE_STEPS,
          keep: Optional[Path] = None, log=sys.stderr) -> dict:
  """Train the tiny experiment in the image, offline, and check its job directory."""
  lock = lock_path(release, platform)
  require_engine()
  image = image or image_ref(release, platform)
  if not image_exists(image):
    raise ImageError(f'image {image} not found; build it with ./noxw -s build -- {release} '
                     f'{platform}')
  verify_in_image(image)
  out = Path(keep) if keep else Path(tempfile.mkdtemp(prefix='pax-smoke-'))
  out.mkdir(parents=True, exist_ok=True)
  os.chmod(out, 0o777)  # the image runs as an unprivileged user
  try:
    t0 = time.monotonic()
    r = docker('run', '--rm', '--network', 'none', '-v', f'{out}:/out', image,
               f'--exp={SMOKE_EXPERIMENT}', '--job_log_dir=/out/job',
               f'--set=NUM_TRAIN_STEPS={steps}', f'--set=CHECKPOINT_EVERY_N_STEPS={steps}',
               check=False)
    if r.returncode != 0:
      lines = (r.stdout + r.stderr).strip().splitlines()
      raise ImageError(f'smoke: {image} exited {r.returncode}: {lines[-1] if lines else ""}')
    result = check_job_dir(out / 'job', release, sha256_file(lock))
    result['seconds'] = round(time.monotonic() - t0, 1)
    print(f'pax images: smoke {image}: {len(result["checkpoints"])} checkpoint(s), loss '
          f'{result["first_loss"]:.3f} -> {result["last_loss"]:.3f}, {result["seconds"]}s',
          file=log)
    return result
  finally:
    if not keep:
      # Files were written by the container's user; remove them through the container too.
      docker('run', '--rm', '--network', 'none', '--user', '0', '-v', f'{out}:/out',
             '--entrypoint', 'sh', image, '-c', 'rm -rf /out/job', check=False)
      shutil.rmtree(out, ignore_errors=True)


# --------------------------------------------------------------------------- publish

def _registry_answers(registry: str) -> bool:
  try:
    with urllib.request.urlopen(f'http://{registry}/v2/', timeout=5) as r:
      return r.status == 200
  except urllib.error.HTTPError as e:
    return e.code == 401  # answers, wants credentials
  except (urllib.error.URLError, OSError, ValueError):
    return False


def registry_digest(registry: str, repo: str, tag: str) -> Optional[str]:
  """The manifest digest the registry serves for repo:tag (None if it has none)."""
  req = urllib.request.Request(
      f'http://{registry}/v2/{repo}/manifests/{tag}', method='HEAD',
      headers={'Accept': 'application/vnd.docker.distribution.manifest.v2+json, '
                         'application/vnd.oci.image.manifest.v1+json'})
  try:
    with urllib.request.urlopen(req, timeout=10) as r:
      return r.headers.get('Docker-Content-Digest')
  except (urllib.error.URLError, OSError):
    return None


def _push(ref: str, registry: str) -> str:
  r = docker('push', ref, check=False)
  out = r.stdout + r.stderr
  if r.returncode != 0:
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    raise ImageError(f'registry {registry} refused the push of {ref}: '
                     f'{lines[-1] if lines else "exit " + str(r.returncode)}')
  m = re.search(r'digest: (sha256:[0-9a-f]{64})', out)
  if not m:
    raise ImageError(f'docker push {ref} printed no digest')
  return m.group(1)


def publish(release: str, platform: str, registry: str, image: Optional[str] = None,
            log=sys.stderr) -> dict:
  """Push pax:<release>-<platform> and move latest-<platform>; pull back by digest; verify."""
  lock_path(release, platform)
  if not re.fullmatch(r'[A-Za-z0-9.-]+(:\d+)?', registry or ''):
    raise ImageError(f'bad --registry {registry!r}: write HOST:PORT, e.g. 127.0.0.1:5000',
                     usage=True)
  require_engine()
  image = image or image_ref(release, platform)
  if not image_exists(image):
    raise ImageError(f'image {image} not found; build it with ./noxw -s build -- {release} '
                     f'{platform}')
  if not _registry_answers(registry):
    raise ImageError(f'registry {registry} does not answer at http://{registry}/v2/; start one '
                     f'with ci/registry.sh start')
  remote = f'{registry}/{IMAGE_REPO}'
  versioned, latest = f'{remote}:{release}-{platform}', f'{remote}:latest-{platform}'
  docker('tag', image, versioned)
  docker('tag', image, latest)
  try:
    digest = _push(versioned, registry)
    latest_digest = _push(latest, registry)
  finally:
    docker('rmi', versioned, latest, check=False)
  if latest_digest != digest:
    raise ImageError(f'latest-{platform} points at {latest_digest}, not {digest}')
  for tag in (f'{release}-{platform}', f'latest-{platform}'):
    served = registry_digest(registry, IMAGE_REPO, tag)
    if served != digest:
      raise ImageError(f'registry {registry} serves {served} for {IMAGE_REPO}:{tag}, '
                       f'pushed {digest}')
  by_digest = f'{remote}@{digest}'
  r = docker('pull', by_digest, check=False)
  if r.returncode != 0:
    raise ImageError(f'pull of {by_digest} failed: {(r.stderr or r.stdout).strip()}')
  try:
    if docker('image', 'inspect', '-f', '{{.Id}}', by_digest).stdout != \
       docker('image', 'inspect', '-f', '{{.Id}}', image).stdout:
      raise ImageError(f'{by_digest} pulled back a different image than {image}')
    report = verify_in_image(by_digest)
  finally:
    docker('rmi', by_digest, check=False)
  print(f'pax images: published {versioned} and {latest} at {digest}', file=log)
  return {'digest': digest, 'refs': [versioned, latest], 'verify': report}


# --------------------------------------------------------------------------- CLI

def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog='python -m pax.dist.images',
                              description=__doc__.split('\n')[0])
  sub = p.add_subparsers(dest='cmd', required=True)
  for name in ('wheelhouse', 'build', 'smoke', 'publish'):
    s = sub.add_parser(name)
    s.add_argument('release')
    s.add_argument('platform')
    if name == 'build':
      s.add_argument('--base-image', default=os.environ.get('PAX_BASE_IMAGE', DEFAULT_BASE_IMAGE),
                     help=f'default {DEFAULT_BASE_IMAGE} (ci/base-image.sh); or e.g. '
                          f'python:3.11-slim-bookworm')
      s.add_argument('--tag', help='default pax:RELEASE-PLATFORM')
      s.add_argument('--wheelhouse', type=Path, help='default wheelhouse/RELEASE-PLATFORM')
    if name == 'smoke':
      s.add_argument('--image', help='default pax:RELEASE-PLATFORM')
      s.add_argument('--steps', type=int, default=SMOKE_STEPS)
      s.add_argument('--keep', type=Path, help='keep the job directory here')
    if name == 'publish':
      s.add_argument('--registry', required=True, help='HOST:PORT, e.g. 127.0.0.1:5000')
      s.add_argument('--image', help='default pax:RELEASE-PLATFORM')
  return p


def run(argv: list[str], log=sys.stderr) -> object:
  """Parse and run one command; raises ImageError (argparse exits 2 on malformed arguments)."""
  a = parser().parse_args(argv)
  if a.cmd == 'wheelhouse':
    return prepare_wheelhouse(a.release, a.platform, log=log)
  if a.cmd == 'build':
    return build(a.release, a.platform, base_image=a.base_image, tag=a.tag,
                 wheelhouse=a.wheelhouse, log=log)
  if a.cmd == 'smoke':
    return smoke(a.release, a.platform, image=a.image, steps=a.steps, keep=a.keep, log=log)
  return publish(a.release, a.platform, a.registry, image=a.image, log=log)


def main(argv: Optional[list[str]] = None) -> int:
  try:
    result = run(sys.argv[1:] if argv is None else argv)
  except ImageError as e:
    print(f'pax images: error: {e}', file=sys.stderr)
    return 2 if e.usage else 1
  except KeyboardInterrupt:
    return 130
  print(json.dumps(result) if isinstance(result, dict) else result)
  return 0


if __name__ == '__main__':
  sys.exit(main())
