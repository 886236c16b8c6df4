"""Orbax checkpointing in Pax's layout: <job_dir>/checkpoints/checkpoint_<8-digit step>/state.

Each checkpoint is a Composite: `state` (the train state) and, for inputs that are streams (C4),
`data`: the input iterator's position, one JSON file per process written by grain's orbax
handler. Checkpoints without `data` still restore. Orbax writes to a temporary directory and
renames it when complete, so a checkpoint cut off mid-write is never listed as a step.

Each checkpoint holds SHA256SUMS, every other file's sha256 in `sha256sum`'s format, written by
process 0 once orbax has committed the checkpoint (`record_digests`). Restoring checks it before
reading anything else (`check_digests`): a file that differs, or is missing, is damage. A
checkpoint without one (written before checkpoints recorded digests, or cut off between orbax's
commit and the record) restores with one line saying that it cannot be checked.

Resuming tells three failures apart (`restore_newest`, shared with the Flax-file checkpoints):
- a checkpoint written by another model (tree, shapes or dtypes in its metadata differ from the
  run's) is a usage error: nothing is moved;
- a storage error that may pass (timeouts, EIO, stale handles) is retried with backoff, then ends
  the run without moving anything;
- anything else while reading (missing or truncated files, bad metadata) is damage: the processes
  agree on it, and process 0 alone moves the checkpoint aside and the previous one is tried.
When every checkpoint is damaged (or all were set aside before), resuming stops with a usage error
naming them instead of starting again from step 0, unless asked to start over.
"""

import concurrent.futures
import contextlib
import errno
import functools
import hashlib
import json
import logging as std_logging
import os
import re
import shutil
import sys
import time
import types
from typing import Callable, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from jax import tree_util
from jax.experimental import multihost_utils

from pax.errors import PaxError, UsageError

STEP_PREFIX = "checkpoint"
STEP_DIGITS = 8
SET_ASIDE_DIR = "checkpoints_damaged"  # beside checkpoints/: orbax never lists it


# Read attempts for a checkpoint whose storage fails in a way that may pass, and the first wait
# (doubled each time: 1 + 2 + 4 s). Module constants so tests can shorten them.
READ_ATTEMPTS = 4
READ_BACKOFF_S = 1.0
# OS errors that say the storage did not answer, not that the bytes are bad (NFS and FUSE
# mounts of object stores raise these during outages and failovers).
_TRANSIENT_ERRNOS = frozenset({
    errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.EIO, errno.ETIMEDOUT, errno.ESTALE,
    errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED, errno.ENETDOWN,
    errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENOLCK,
})  # fmt: skip
# tensorstore and gRPC report a storage that did not answer with these status codes.
_TRANSIENT_STATUS = ("UNAVAILABLE:", "DEADLINE_EXCEEDED:")


class CheckpointError(PaxError):
    """A checkpoint could not be written or read; the message says which and what survives."""


class StorageUnavailable(CheckpointError):
    """Reading a checkpoint kept failing with storage errors that are not damage."""


class CheckpointDamaged(CheckpointError):
    """A checkpoint's file differs from the sha256 recorded when it was written, or is missing."""


# orbax 0.12 and tensorstore 0.1 checksum only their own structure (OCDBT's manifest and b-tree
# nodes, zarr3's shard index), not the arrays' bytes: a flipped byte in a zstd chunk of floats
# (mostly stored raw) reads back as other numbers without an error, and orbax writes no option
# to add zarr3's crc32c codec to the chunks. The JSON files (orbax's metadata, the input position)
# are checked by nobody. So the digests of every file are ours.
DIGESTS = "SHA256SUMS"


def record_digests(checkpoint_dir: str) -> None:
    """Writes DIGESTS into a committed checkpoint: every other file's sha256, in `sha256sum`'s
    format (`sha256sum -c SHA256SUMS` checks a copy by hand), under a temporary name, renamed."""
    lines = [f"{_sha256(checkpoint_dir, name)}  {name}\n" for name in _files(checkpoint_dir)]
    temporary = os.path.join(checkpoint_dir, f".{DIGESTS}.tmp")
    with open(temporary, "w", encoding="utf-8") as f:
        f.writelines(lines)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, os.path.join(checkpoint_dir, DIGESTS))


def check_digests(checkpoint_dir: str) -> bool:
    """Checks every file of a checkpoint against its DIGESTS: CheckpointDamaged naming the first
    file that differs, is missing, or is not listed (a record cut short); False when the
    checkpoint has no DIGESTS."""
    try:
        with open(os.path.join(checkpoint_dir, DIGESTS), "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return False
    recorded = {}
    for line in text.splitlines():
        digest, _, name = line.decode("utf-8", "replace").partition("  ")
        if not re.fullmatch(r"[0-9a-f]{64}", digest) or not name:
            raise CheckpointDamaged(f"{DIGESTS} is damaged (line {len(recorded) + 1})")
        recorded[name] = digest
    for name, digest in recorded.items():
        try:
            actual = _sha256(checkpoint_dir, name)
        except FileNotFoundError:
            raise CheckpointDamaged(f"{name} is missing") from None
        if actual != digest:
            raise CheckpointDamaged(f"{name} differs from the sha256 recorded when it was written")
    unlisted = sorted(set(_files(checkpoint_dir)) - recorded.keys())
    if unlisted:
        raise CheckpointDamaged(f"{unlisted[0]} is not in {DIGESTS} (it is cut short)")
    return True


def _files(checkpoint_dir: str) -> list[str]:
    """The checkpoint's files, relative to it, but DIGESTS and hidden ones (an NFS client's
    .nfs* stand-ins, a record being written)."""
    found = []
    for root, _, names in os.walk(checkpoint_dir):
        for name in names:
            if not name.startswith(".") and name != DIGESTS:
                found.append(os.path.relpath(os.path.join(root, name), checkpoint_dir))
    return sorted(found)


def _sha256(checkpoint_dir: str, name: str) -> str:
    with open(os.path.join(checkpoint_dir, name), "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def checked(checkpoint_dir: str) -> None:
    """check_digests, and one line (process 0) when the checkpoint has none to check."""
    if not check_digests(checkpoint_dir) and jax.process_index() == 0:
        logging.warning(
            "%s has no %s (written before checkpoints recorded their files' sha256): its bytes "
            "cannot be checked",
            checkpoint_dir,
            DIGESTS,
        )


class Checkpointer:
    def __init__(
        self, job_dir: str, max_to_keep: int, async_save: bool = True, saving: bool = True
    ):
        self.directory = os.path.join(os.path.abspath(job_dir), "checkpoints")
        self.saving = saving
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            step_prefix=STEP_PREFIX,
            step_format_fixed_length=STEP_DIGITS,
            enable_async_checkpointing=async_save,
            create=saving,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)
        # Digests are recorded once orbax has committed a save, beside the training steps.
        self._recorder = concurrent.futures.ThreadPoolExecutor(1, "pax_checkpoint_digests")
        self._recording = None

    def latest_step(self) -> Optional[int]:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def save(self, step: int, state, data=None) -> bool:
        """Starts saving `state` as step `step` (asynchronously unless configured otherwise), with
        the input iterator `data` (get_state() -> JSON-able dict, set_state(dict)) when given.

        A failure of this save, or of the previous asynchronous one, raises CheckpointError:
        a run must not go on without checkpoints.
        """
        if not self.saving:
            return False
        try:
            # Orbax silently skips a save requested while the previous one is still being written;
            # every save asked for here must happen, so wait for that one first.
            self._wait_until_recorded()
            items = {"state": ocp.args.StandardSave(state)}
            if data is not None:
                items["data"] = _grain_checkpoint().CheckpointSave(_AsBytes(data))
            saved = self._manager.save(step, args=ocp.args.Composite(**items), force=True)
            if saved and jax.process_index() == 0:  # every process's files are on shared storage
                self._recording = self._recorder.submit(self._record, step)
            return saved
        except Exception as e:  # orbax re-raises background write errors of any type here
            raise self._write_error(step, e) from e

    def _record(self, step: int) -> None:
        self._manager.wait_until_finished()  # committed: no file of it changes after this
        record_digests(os.path.join(self.directory, step_name(step)))

    def _wait_until_recorded(self) -> None:
        """Waits for the last save and its digests; raises what either raised."""
        self._manager.wait_until_finished()
        recording, self._recording = self._recording, None
        if recording is not None:
            recording.result()

    def _write_error(self, step: int, error: Exception) -> CheckpointError:
        self._manager.reload()
        kept = self._manager.latest_step()
        kept = (
            f"checkpoint_{kept:0{STEP_DIGITS}d} is intact"
            if kept is not None
            else "there is no earlier checkpoint"
        )
        return CheckpointError(
            f"writing a checkpoint under {self.directory} failed near step "
            f"{step} ({type(error).__name__}: {error}); {kept}; free space or fix "
            "permissions there and rerun the same command to resume"
        )

    def restore_latest(self, abstract_state, data=None, start_over: bool = False):
        """(step, state) of the newest checkpoint that restores, or (None, None); `data`, an input
        iterator, is set to the position saved with it.

        UsageError when the newest checkpoint was written by another model (its metadata's tree,
        shapes or dtypes differ) or by another number of processes; StorageUnavailable when
        storage errors outlast the retries; a damaged checkpoint is set aside, and when none is
        left that restores, UsageError unless start_over (`restore_newest`).
        """

        def attempt(step):
            # First: damage in the metadata could pass for another model's checkpoint.
            checked(os.path.join(self.directory, step_name(step)))
            if data is not None:
                self._check_data(step)
            check_compatible(step_name(step), self._metadata(step), abstract_state)
            return self.restore(step, abstract_state, data)

        return restore_newest(
            self.directory, self.all_steps(), attempt, self._manager.reload, start_over
        )

    def _metadata(self, step: int):
        """The saved state's tree of array metadata (shape, dtype), read from the checkpoint."""
        path = epath.Path(self.directory) / step_name(step) / "state"
        return ocp.StandardCheckpointHandler().metadata(path)

    def restore(self, step: int, abstract_state, data=None):
        """The state at `step`, placed by the shardings in abstract_state's ShapeDtypeStructs;
        `data` (an input iterator) is set to its saved position where the checkpoint has one."""
        items = {"state": ocp.args.StandardRestore(abstract_state)}
        if data is not None and os.path.isdir(self._data_dir(step)):
            items["data"] = _grain_checkpoint().CheckpointRestore(_AsBytes(data))
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        return restored["state"]

    def _data_dir(self, step: int) -> str:
        return os.path.join(self.directory, f"{STEP_PREFIX}_{step:0{STEP_DIGITS}d}", "data")

    def _check_data(self, step: int) -> None:
        """An input position saved by another number of processes is a usage error, not damage."""
        directory = self._data_dir(step)
        if not os.path.isdir(directory):
            return
        mine = f"process_{jax.process_index()}-of-{jax.process_count()}.json"
        if not os.path.isfile(os.path.join(directory, mine)):
            found = sorted(os.listdir(directory))
            raise UsageError(
                f"{directory} holds the input position of another set of processes "
                f"({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}), not {mine}; "
                "resume with the number of processes that wrote it"
            )

    def close(self) -> None:
        """Waits for the last save and its digests; raises CheckpointError if either failed."""
        try:
            self._wait_until_recorded()
        except Exception as e:  # the background save's own error type
            raise self._write_error(self._manager.latest_step() or 0, e) from e
        finally:
            self._recorder.shutdown()
            self._manager.close()


def step_name(step: int) -> str:
    return f"{STEP_PREFIX}_{step:0{STEP_DIGITS}d}"


def is_transient(error: BaseException) -> bool:
    """Whether `error` (or what it was raised from) says the storage did not answer."""
    while error is not None:
        if isinstance(error, (TimeoutError, ConnectionError)):
            return True
        if isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS:
            return True
        if any(code in str(error) for code in _TRANSIENT_STATUS):
            return True
        # Only explicit chaining (`raise ... from`): an error raised while handling another is
        # about what it says, not about the one before.
        error = error.__cause__
    return False


def read_with_retries(what: str, read: Callable):
    """read(), retried with backoff while it fails with storage errors that may pass."""
    for attempt in range(1, READ_ATTEMPTS + 1):
        try:
            return read()
        except Exception as e:  # whatever the storage stack raises; sorted by is_transient
            if not is_transient(e):
                raise
            if attempt == READ_ATTEMPTS:
                raise StorageUnavailable(
                    f"reading {what} failed {READ_ATTEMPTS} times with storage errors "
                    f"({type(e).__name__}: {_first_line(e)}); that is not damage, so nothing was "
                    "moved; rerun the same command once the storage answers again"
                ) from e
            delay = READ_BACKOFF_S * 2 ** (attempt - 1)
            logging.warning(
                "reading %s: %s: %s (attempt %d of %d); retrying in %.0f s",
                what, type(e).__name__, _first_line(e), attempt, READ_ATTEMPTS, delay,
            )  # fmt: skip
            time.sleep(delay)


_OK, _DAMAGED, _UNREADABLE = 0, 1, 2


def restore_newest(
    directory: str, steps, attempt: Callable, reload: Callable, start_over: bool = False
):
    """(step, state) from the newest of `steps` that attempt(step) restores, or (None, None)
    for a run with nothing to resume.

    Every process reads; their verdicts are combined (the worst wins) so that all of them
    resume from the same step or stop together. A usage error (another model, another number of
    processes) propagates from every process alike, since each reads the same files. When every
    checkpoint is damaged, or an earlier run set them all aside, UsageError naming them unless
    start_over (then (None, None): training starts again from step 0).
    """
    moved = []
    _drop_abandoned_reads()  # before reading: the first may come as soon as a read fails
    for step in sorted(steps, reverse=True):
        state, error, verdict = None, None, _OK
        try:
            with _orbax_logs_kept_if_read():
                state = read_with_retries(
                    f"{step_name(step)} under {directory}", functools.partial(attempt, step)
                )
        except UsageError:
            raise
        except StorageUnavailable as e:
            error, verdict = e, _UNREADABLE
        except Exception as e:  # tensorstore, orbax, msgpack and json raise many types on damage
            error, verdict = e, _DAMAGED
        agreed = _worst_across_processes(verdict)
        if agreed == _OK:
            return step, state
        if agreed == _UNREADABLE:
            raise (
                error
                if verdict == _UNREADABLE
                else StorageUnavailable(
                    f"another process could not read {step_name(step)} under {directory} (storage "
                    "errors, see its log); nothing was moved; rerun once the storage answers again"
                )
            )
        moved.append(
            set_aside(directory, step, error or "another process could not read it; see its log")
        )
        reload()
    _nothing_left(directory, moved, start_over)
    return None, None


# Why restore_newest's answer when nothing restores is a usage error, and how to go on.
START_OVER_FLAG = "--start_over_if_damaged"


def _nothing_left(directory: str, moved: list[str], start_over: bool) -> None:
    """UsageError (unless start_over) when the run has checkpoints but none restores: the ones
    just moved aside, or, with none left under `directory`, the ones an earlier run moved."""
    aside_dir = os.path.join(os.path.dirname(directory), SET_ASIDE_DIR)
    if moved:
        what = (
            f"every checkpoint under {directory} is damaged: {_names(moved)}, moved to {aside_dir}"
        )
    elif os.path.isdir(aside_dir) and os.listdir(aside_dir):
        what = (
            f"{directory} holds no checkpoint: its run's were set aside as damaged "
            f"({_names(sorted(os.listdir(aside_dir), reverse=True))} in {aside_dir})"
        )
    else:
        return
    if start_over:
        if jax.process_index() == 0:
            logging.warning("%s; training starts over from step 0 (%s)", what, START_OVER_FLAG)
        return
    raise UsageError(
        f"{what}; nothing was trained. Put good copies back under {directory}, or rerun with "
        f"{START_OVER_FLAG} to train from step 0"
    )


def _names(paths) -> str:
    names = [os.path.basename(p) for p in paths]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


@contextlib.contextmanager
def _orbax_logs_kept_if_read():
    """Holds back orbax's own log records while a checkpoint is read: if the read fails, the
    damage is reported in one line (set_aside) and orbax's lines about it are dropped; if it
    works, they are logged as they came."""
    held = []

    def hold(record) -> bool:
        if f"{os.sep}orbax{os.sep}" in record.pathname:
            held.append(record)
            return False
        return True

    logger = std_logging.getLogger("absl")
    logger.addFilter(hold)
    try:
        yield
    finally:
        logger.removeFilter(hold)
    for record in held:  # reached only when the read worked
        logger.handle(record)


def _drop_abandoned_reads() -> None:
    """Keeps the reads of a damaged checkpoint from printing tracebacks after it was reported.

    orbax gives up on a restore at the first array that fails and closes its event loop while
    tensorstore is still reading the others; each of those then reports into the closed loop
    ('Event loop is closed') or dies with orbax's coroutine, and Python prints every one as an
    ignored exception, for as long as the reads take to finish."""
    if getattr(sys.unraisablehook, "drops_abandoned_reads", False):
        return
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        error, origin = unraisable.exc_value, unraisable.object
        closed = isinstance(error, RuntimeError) and str(error) == "Event loop is closed"
        orbax_read = isinstance(origin, types.CoroutineType) and (
            f"{os.sep}orbax{os.sep}" in origin.cr_code.co_filename
        )
        if not (closed or orbax_read):
            previous(unraisable)

    hook.drops_abandoned_reads = True
    sys.unraisablehook = hook
    # A read that failed after orbax stopped waiting for it leaves its future's error unread,
    # which asyncio logs at ERROR when the future is collected: tensorstore's OCDBT read errors
    # of the checkpoint already reported.
    std_logging.getLogger("asyncio").addFilter(_not_an_abandoned_read)


def _not_an_abandoned_read(record) -> bool:
    # asyncio names the future's class ("Future", "_GatheringFuture"), and orbax wraps
    # tensorstore's error in its own, so the OCDBT read error may be the cause of the one logged.
    if "exception was never retrieved" not in record.getMessage() or not record.exc_info:
        return True
    error = record.exc_info[1]
    while error is not None:
        if isinstance(error, ValueError) and "in OCDBT database" in str(error):
            return False
        error = error.__cause__
    return True


def _worst_across_processes(verdict: int) -> int:
    if jax.process_count() == 1:
        return verdict
    return int(np.max(multihost_utils.process_allgather(np.int32(verdict))))


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def set_aside(directory: str, step: int, reason) -> str:
    """Moves a damaged checkpoint to <job_dir>/checkpoints_damaged/ and says why in one line;
    returns where it went.

    Process 0 alone moves it (on shared storage every process sees the same directory), after
    every process has finished reading it and before any lists the checkpoints again.
    """
    name = step_name(step)
    _barrier(f"pax_set_aside_{name}_read")
    aside = os.path.join(os.path.dirname(directory), SET_ASIDE_DIR, name)
    taken = 0
    while os.path.exists(aside):  # set aside before: keep both
        taken += 1
        aside = os.path.join(os.path.dirname(directory), SET_ASIDE_DIR, f"{name}.{taken}")
    if jax.process_index() == 0:
        os.makedirs(os.path.dirname(aside), exist_ok=True)
        shutil.move(os.path.join(directory, name), aside)
        what = _reason(reason) if isinstance(reason, BaseException) else reason
        logging.warning("checkpoint %s is damaged (%s); moved to %s", name, what, aside)
    _barrier(f"pax_set_aside_{name}_moved")
    return aside


# tensorstore appends the full spec of what it read ([tensorstore_spec='{...}'], often kilobytes
# of JSON) and where in its source it failed: neither says more about the damage.
_ANNOTATION = re.compile(r"\s*\[[a-z_]+(?:\[\d+\])?='[^']*'\]")


def _reason(error: BaseException) -> str:
    """The whole reason a checkpoint did not read, in one line: the innermost error it was
    raised from (orbax's wrapper says only which slice it was reading), without tensorstore's
    annotations."""
    while error.__cause__ is not None:
        error = error.__cause__
    text = " ".join(_ANNOTATION.sub("", str(error)).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def check_compatible(where: str, saved, abstract_state) -> None:
    """UsageError naming the first differences when the saved tree of arrays (shapes, dtypes)
    is not the one this run would restore into: another model wrote it."""
    ours, theirs = _arrays(abstract_state), _arrays(saved)
    differences = [
        f"{path} is {_describe(theirs[path])} there, {_describe(ours[path])} in this run"
        for path in sorted(ours.keys() & theirs.keys(), key=_params_first)
        if ours[path] != theirs[path]
    ]
    differences += [f"this run has {p}, the checkpoint does not" for p in
                    sorted(ours.keys() - theirs.keys(), key=_params_first)]  # fmt: skip
    differences += [f"the checkpoint has {p}, this run does not" for p in
                    sorted(theirs.keys() - ours.keys(), key=_params_first)]  # fmt: skip
    if differences:
        more = f" (and {len(differences) - 1} more)" if len(differences) > 1 else ""
        raise UsageError(
            f"{where} was written by another model: {differences[0]}{more}; nothing was moved. "
            "Use a new --job_log_dir for this model, or resume with the experiment and --set "
            "values that wrote it"
        )


def _arrays(tree) -> dict:
    """{'params/layers/ffn/wi': (shape, dtype)}: paths spelled alike for the run's abstract state
    (dicts, tuples, named tuples) and orbax's metadata (dicts and lists)."""
    return {
        "/".join(_key_name(k) for k in path): (tuple(leaf.shape), np.dtype(leaf.dtype))
        for path, leaf in tree_util.tree_leaves_with_path(tree)
    }


def _key_name(key) -> str:
    for attribute in ("key", "name", "idx"):  # DictKey, GetAttrKey, SequenceKey
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _params_first(path: str):
    return (not path.startswith("params/"), path)


def _describe(array) -> str:
    shape, dtype = array
    return f"{list(shape)} {dtype}"


def _first_line(error) -> str:
    text = str(error)
    return text.splitlines()[0][:200] if text else ""


class _AsBytes:
    """An input iterator (get_state() -> JSON-able dict) as grain's orbax handler takes one that
    is not a grain DatasetIterator: state as JSON bytes, and a start_prefetch() to call."""

    def __init__(self, data):
        self.data = data

    def get_state(self) -> bytes:
        return json.dumps(self.data.get_state()).encode()

    def set_state(self, state: bytes) -> None:
        self.data.set_state(json.loads(state))

    def start_prefetch(self) -> None:
        """The input restarts at its next batch by itself."""


def _grain_checkpoint():
    """grain's orbax handler (per-process JSON files); imported only for stream inputs (C4)."""
    from grain import checkpoint

    return checkpoint
