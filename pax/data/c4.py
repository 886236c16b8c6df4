"""C4 from local JSON-lines shards, on grain: read, tokenize, shuffle, pack, batch; resumable.

Files are the public C4 `en` layout: c4-train.NNNNN-of-MMMMM.json.gz and c4-validation.*.json.gz,
one JSON object per line with `text` (`url` and `timestamp` are not used). Paths go through
etils.epath, the path layer orbax's checkpoints use.

Per process, every stage a grain dataset whose position is part of the iterator state:
  reading units of this process, shuffled with the run's seed (reshuffled every epoch)
  -> CYCLE_LENGTH units read and tokenized (EOS appended) at once, each in its own thread
     (interleave) -> window shuffle (train only)
  -> concat-then-split into SEQ_LEN rows with segment ids and positions
  -> LM rows -> this process's rows of the batch -> a prefetch thread ahead of the trainer.

Sharding over readers: with P readers and F shards each shard is cut into m = ceil(P / F)
stripes (line i belongs to stripe i % m) and the F*m (shard, stripe) units are dealt out
round-robin, so readers read disjoint records that together cover every record. A reader is a
process, or the processes whose devices hold the same batch rows (pax.train.placement.reader),
which read the same units and so feed the same rows.
"""

import gzip
import json
import math
import zlib
from typing import Optional

import grain
import numpy as np
from absl import logging
from etils import epath

from pax.data.corpus import embedded_text
from pax.errors import UsageError

DATA_DIR_ENV = "C4_DATA_DIR"
SPLITS = ("train", "validation")
CYCLE_LENGTH = 8  # shards read at once
SHUFFLE_WINDOW = 1024  # documents shuffled together after interleaving
PREFETCH_BATCHES = 4
BAD_RECORD_POLICIES = ("stop", "skip")
_FIX = (
    "fix or remove the file, or --set BAD_RECORD_POLICY=skip to skip bad records and count "
    "them (bad_records in the metrics)"
)


class C4DataError(UsageError):
    """A shard or record that cannot be read; the message names the file and line."""

    def __str__(self):
        # One line: grain appends a note on its traceback filtering to errors raised in its stages.
        return super().__str__().split("\n", 1)[0]


def shard_pattern(split: str) -> str:
    return f"c4-{split}.*-of-*.json.gz"


def list_shards(data_dir: Optional[str], split: str) -> list[str]:
    """The split's shard paths under data_dir, sorted; UsageError when there are none."""
    if not data_dir:
        raise UsageError(
            f"DATA_SOURCE=c4 needs the directory holding {shard_pattern('train')} and "
            f"{shard_pattern('validation')}: --data_dir=DIR, --set DATA_DIR=DIR "
            f"or {DATA_DIR_ENV}=DIR"
        )
    root = epath.Path(data_dir)
    if not root.is_dir():
        raise UsageError(
            f"C4 data directory {data_dir} does not exist; point --data_dir (or "
            f"{DATA_DIR_ENV}) at a local copy of C4 en"
        )
    shards = sorted(str(p) for p in root.glob(shard_pattern(split)))
    if not shards:
        raise UsageError(
            f"no {shard_pattern(split)} under {data_dir}; point --data_dir at the "
            "directory of the C4 en JSON-lines shards"
        )
    return shards


def units_of(shards: list[str], process_index: int, process_count: int) -> list[tuple]:
    """This process's reading units (path, stripe, stripes); see the module docstring."""
    stripes = math.ceil(process_count / len(shards))
    units = [(path, k, stripes) for path in shards for k in range(stripes)]
    return units[process_index::process_count]


class _UnitIterator(grain.DatasetIterator):
    """Lines of one stripe of one shard as {'text': str}, or {'text': None} for a bad record
    when skip_bad (counted downstream); the state is the number of lines consumed."""

    def __init__(self, unit: tuple, skip_bad: bool):
        super().__init__()
        self._path, self._stripe, self._stripes = unit
        self._skip_bad = skip_bad
        self._line, self._done, self._file = 0, False, None

    def _readline(self) -> bytes:
        if self._file is None:
            try:
                self._file = gzip.GzipFile(fileobj=epath.Path(self._path).open("rb"))
            except OSError as e:
                raise C4DataError(f"{self._path}: cannot open ({e})") from e
            for _ in range(self._line):  # resuming: skip what was consumed before
                self._file.readline()
        return self._file.readline()

    def _bad(self, message: str) -> dict:
        if not self._skip_bad:
            raise C4DataError(f"{message}; {_FIX}")
        logging.warning("skipping a bad C4 record: %s", message)
        return {"text": None}

    def __next__(self):
        while not self._done:
            try:
                raw = self._readline()
            except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
                self._finish()
                return self._bad(
                    f"{self._path}: corrupt gzip data after line {self._line} "
                    f"({type(e).__name__}: {e}); the rest of the shard is unreadable"
                )
            if not raw:
                self._finish()
                if self._line <= self._stripe:
                    raise C4DataError(
                        f"{self._path} has {self._line} records, none for reader "
                        f"{self._stripe + 1} of the {self._stripes} that share it; "
                        "use fewer processes or more shards"
                    )
                break
            self._line += 1
            if (self._line - 1) % self._stripes != self._stripe:
                continue
            where = f"{self._path}:{self._line}"
            try:
                record = json.loads(raw.rstrip(b"\r\n").decode("utf-8"))
            except UnicodeDecodeError as e:
                return self._bad(f"{where}: invalid UTF-8 ({e.reason} at byte {e.start})")
            except json.JSONDecodeError as e:
                return self._bad(f"{where}: invalid JSON ({e.msg}, column {e.colno})")
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                return self._bad(f"{where}: no string field 'text'")
            return {"text": record["text"]}
        raise StopIteration

    def _finish(self):
        self._done = True
        if self._file is not None:
            self._file.close()
            self._file = None

    def get_state(self):
        return {"line": self._line, "done": int(self._done)}

    def set_state(self, state):
        self._finish()
        self._line, self._done = state["line"], bool(state["done"])


class UnitDataset(grain.IterDataset):
    """One reading unit (path, stripe, stripes) of a shard."""

    def __init__(self, unit: tuple, skip_bad: bool):
        super().__init__()
        self.unit, self.skip_bad = unit, skip_bad

    def __iter__(self):
        return _UnitIterator(self.unit, self.skip_bad)


def _tokenize(tokenizer, record: dict) -> dict:
    """Token ids + EOS; a bad record becomes an empty document that carries skipped=1."""
    if record["text"] is None:
        return {"tokens": np.zeros(0, np.int32), "skipped": np.ones(1, np.int32)}
    tokens = np.append(tokenizer.encode(record["text"]), tokenizer.eos_id).astype(np.int32)
    return {"tokens": tokens, "skipped": np.zeros(1, np.int32)}


def _lm_row(eos_id: int, packed: dict) -> dict:
    """A packed row as the trainer's batch row: each document's first input is EOS, so no input
    crosses a document boundary; weights are 0 on padding."""
    targets = packed["tokens"]
    positions = packed["tokens_positions"]
    segment_ids = packed["tokens_segment_ids"]
    return {
        "inputs": np.where(positions > 0, np.roll(targets, 1), eos_id).astype(np.int32),
        "targets": targets,
        "weights": (segment_ids > 0).astype(np.float32),
        "positions": positions,
        "segment_ids": segment_ids,
        "skipped": packed["skipped"].sum(dtype=np.int32),
    }


def pipeline(
    units: list[tuple],
    tokenizer,
    seq_len: int,
    rows: int,
    *,
    seed: int,
    training: bool,
    skip_bad: bool = False,
    cycle_length: int = CYCLE_LENGTH,
    shuffle_window: int = SHUFFLE_WINDOW,
    prefetch: int = PREFETCH_BATCHES,
):
    """The grain IterDataset of this process's batches: dicts of (rows, seq_len) arrays plus
    'skipped' (rows,), the bad records met before each row's documents."""
    ds = grain.MapDataset.source(units)
    if training:
        ds = ds.shuffle(seed=seed).repeat()  # repeat reshuffles each epoch
    # Tokenized in each shard's reader thread: sentencepiece's encode releases the GIL, so the
    # CYCLE_LENGTH readers tokenize in parallel.
    ds = ds.map(
        lambda unit: UnitDataset(unit, skip_bad).map(lambda record: _tokenize(tokenizer, record))
    )
    ds = grain.experimental.InterleaveIterDataset(
        ds, cycle_length=min(cycle_length, len(units)), iter_buffer_size=16
    )
    if training:
        ds = grain.experimental.WindowShuffleIterDataset(ds, window_size=shuffle_window, seed=seed)
    ds = grain.experimental.ConcatThenSplitIterDataset(
        ds, length_struct={"tokens": seq_len, "skipped": seq_len}
    )
    ds = ds.map(lambda packed: _lm_row(tokenizer.eos_id, packed))
    ds = ds.batch(rows, drop_remainder=False)
    return grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=prefetch)


class C4Dataset:
    """This process's rows of a C4 split, one batch after another.

    Unlike the embedded and synthetic sources, a batch is not a function of its index: the
    stream's position lives in the grain iterator; get_state() / set_state() give and take it as
    a JSON-able dict, which the checkpointers save with every checkpoint and restore with it.
    """

    def __init__(self, config, tokenizer, process_index: int = 0, process_count: int = 1):
        if config.bad_record_policy not in BAD_RECORD_POLICIES:
            raise UsageError(
                f"BAD_RECORD_POLICY={config.bad_record_policy!r} is not one of "
                f"{', '.join(BAD_RECORD_POLICIES)}"
            )
        self.config, self.tokenizer = config, tokenizer
        self.split = "train" if config.is_training else "validation"
        self.shards = list_shards(config.data_dir, self.split)
        self.units = units_of(self.shards, process_index, process_count)
        self.bad_records = 0  # this process's skipped records so far (checkpointed)
        # A finite split (validation) has ended on this process: the last batch was all padding.
        self.exhausted = False
        self._iter, self._batches, self._pending = None, 0, None

    def _start(self, rows: int) -> None:
        if self._iter is not None:
            self._iter.close()
        self._iter = iter(
            pipeline(
                self.units,
                self.tokenizer,
                self.config.seq_len,
                rows,
                seed=self.config.seed,
                training=self.config.is_training,
                skip_bad=self.config.bad_record_policy == "skip",
            )
        )
        self._batches, self.bad_records, self.exhausted = 0, 0, False
        if self._pending is not None:
            self._iter.set_state(self._pending["iterator"])
            self._batches, self.bad_records = self._pending["batches"], self._pending["bad_records"]
            self._pending = None

    def batch(self, index: int, batch_size: int, rows: slice | np.ndarray = slice(None)) -> dict:
        """Batch `index`: the next one in the stream (index 0 starts the stream afresh)."""
        count = len(np.arange(batch_size)[rows])
        if self._iter is None or (index == 0 and self._batches):
            self._start(count)
        if index != self._batches and self._batches == 0:
            logging.warning(
                "the checkpoint holds no C4 input position; the %s stream starts from its "
                "beginning at step %d",
                self.split,
                index,
            )
            self._batches = index
        if index != self._batches:
            raise RuntimeError(
                f"the C4 stream is at batch {self._batches}, batch {index} was asked "
                "for; it is read in order"
            )
        try:
            batch = next(self._iter)
        except StopIteration:  # a finite split ran out: rows of padding (weight 0)
            batch, self.exhausted = {}, True
        batch = _pad_rows(batch, count, self.config.seq_len, self.tokenizer.eos_id)
        self._batches += 1
        self.bad_records += int(batch.pop("skipped").sum())
        return batch

    def get_state(self) -> dict:
        if self._pending is not None:
            return dict(self._pending)
        return {
            "batches": self._batches,
            "bad_records": self.bad_records,
            "units": len(self.units),
            "iterator": self._iter.get_state() if self._iter is not None else None,
        }

    def set_state(self, state: dict) -> None:
        if state["units"] != len(self.units):
            raise UsageError(
                f"the checkpoint's C4 position is over {state['units']} reading units "
                f"of this process, the data directory now gives {len(self.units)}; resume "
                "with the same shards and number of processes"
            )
        if state["iterator"] is None:
            state = None
        if self._iter is not None:
            self._iter.close()
        self._iter, self._pending = None, state


def _pad_rows(batch: dict, rows: int, seq_len: int, eos_id: int) -> dict:
    """Fills a short (last) batch of a finite split up to `rows` with weight-0 rows."""
    have = len(batch["targets"]) if batch else 0
    if have == rows:
        return batch
    pad = {
        "inputs": np.full((rows - have, seq_len), eos_id, np.int32),
        "targets": np.zeros((rows - have, seq_len), np.int32),
        "weights": np.zeros((rows - have, seq_len), np.float32),
        "positions": np.zeros((rows - have, seq_len), np.int32),
        "segment_ids": np.zeros((rows - have, seq_len), np.int32),
        "skipped": np.zeros(rows - have, np.int32),
    }
    return {k: np.concatenate([batch[k], v]) if batch else v for k, v in pad.items()}


def write_sample_shards(
    out_dir: str,
    train_shards: int = 4,
    validation_shards: int = 1,
    docs_per_shard: int = 64,
    seed: int = 0,
) -> list[str]:
    """C4-format shards of English text (the embedded corpus, cut into documents of 1-8
    paragraphs), for tests, benchmarks and trying the C4 experiments without C4."""
    paragraphs = [p.strip() for p in embedded_text().split("\n\n") if p.strip()]
    rng = np.random.default_rng(seed)
    out = epath.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written, doc = [], 0
    for split, count in (("train", train_shards), ("validation", validation_shards)):
        for shard in range(count):
            path = out / f"c4-{split}.{shard:05d}-of-{count:05d}.json.gz"
            lines = []
            for _ in range(docs_per_shard):
                start = int(rng.integers(len(paragraphs)))
                text = "\n".join(paragraphs[start : start + int(rng.integers(1, 9))])
                lines.append(
                    json.dumps(
                        {
                            "text": text,
                            "timestamp": "2019-04-25T12:57:54Z",
                            "url": f"https://example.com/{split}/{doc}",
                        }
                    )
                )
                doc += 1
            with path.open("wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
                gz.write(("\n".join(lines) + "\n").encode("utf-8"))
            written.append(str(path))
    return written
