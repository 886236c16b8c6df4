"""Data sources and the batches drawn from them.

For the embedded corpus and synthetic data a batch is a pure function of (seed, index): batch
`step` of a training split is the same on every run, every host and after every resume, so
resuming needs no iterator state. C4 (pax.data.c4) is a stream whose position is checkpointed.
Each process builds only its own rows of the global batch.
"""

import jax
import numpy as np

from pax.data import tokenizers
from pax.data.corpus import embedded_text
from pax.data.tokenizers import ByteTokenizer
from pax.errors import UsageError
from pax.experiments.config import DatasetConfig

EVAL_FRACTION = 0.1  # the embedded corpus's last 10% is held out
# The embedded eval split's windows are one fixed draw, whatever SEED is (EVAL_SEED's default
# is a constant): every run is scored on the same text, as Pax scores a fixed test split, so
# two seeds' eval losses differ by their models alone. Drawn per seed, the windows added a
# sampling spread of their own: the tiny run's final model scored 1.61 to 1.76 on four seeds'
# windows, a std of 0.07 against a seed-to-seed std of about 0.12.


class WindowDataset:
    """Windows of seq_len + 1 tokens from one token array.

    Random windows drawn by (seed, index), or with whole=True the split cut into consecutive
    windows, each once (an eval over the whole split: num_batches of them, the last padded with
    weight-0 rows).
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, seed: int, whole: bool = False):
        if len(tokens) <= seq_len + 1:
            raise UsageError(
                f"the data split has {len(tokens)} tokens, fewer than SEQ_LEN+1 = "
                f"{seq_len + 1}; lower --set SEQ_LEN or use a bigger corpus"
            )
        self.tokens, self.seq_len, self.seed, self.whole = tokens, seq_len, seed, whole
        self.num_windows = (len(tokens) - 1) // seq_len

    def num_batches(self, batch_size: int):
        """Batches in one pass over the whole split; None for random windows (no end)."""
        return -(-self.num_windows // batch_size) if self.whole else None

    def batch(self, index: int, batch_size: int, rows: slice | np.ndarray = slice(None)) -> dict:
        if self.whole:
            window = index * batch_size + np.arange(batch_size)[rows]
            real = window < self.num_windows
            starts = np.where(real, window, 0) * self.seq_len
        else:
            rng = np.random.default_rng([self.seed, index])
            starts = rng.integers(0, len(self.tokens) - self.seq_len - 1, size=batch_size)[rows]
            real = np.ones(len(starts), bool)
        windows = self.tokens[starts[:, None] + np.arange(self.seq_len + 1)]
        return {
            "inputs": windows[:, :-1],
            "targets": windows[:, 1:],
            "weights": np.broadcast_to(real[:, None], windows[:, 1:].shape).astype(np.float32),
        }


class SyntheticDataset:
    """Uniform random tokens: no signal, for speed measurements (as Pax's LmCloud runs)."""

    def __init__(self, vocab_size: int, seq_len: int, seed: int):
        self.vocab_size, self.seq_len, self.seed = vocab_size, seq_len, seed

    def batch(self, index: int, batch_size: int, rows: slice | np.ndarray = slice(None)) -> dict:
        rng = np.random.default_rng([self.seed, index])
        tokens = rng.integers(
            0, self.vocab_size, size=(batch_size, self.seq_len + 1), dtype=np.int32
        )[rows]
        return {
            "inputs": tokens[:, :-1],
            "targets": tokens[:, 1:],
            "weights": np.ones(tokens[:, 1:].shape, np.float32),
        }


def build(config: DatasetConfig, vocab_size: int, reader=None):
    """The dataset `config` names. reader: a function giving this process's (index, count)
    among a stream's readers, called for a stream only (pax.train.placement.reader; default:
    each process a reader of its own, by process index)."""
    if config.source == "embedded":
        tokenizer = ByteTokenizer()
        if vocab_size < tokenizer.vocab_size:
            raise UsageError(
                f"the embedded corpus is byte-level and needs VOCAB_SIZE >= 256 "
                f"(got {vocab_size}); --set VOCAB_SIZE=256"
            )
        tokens = tokenizer.encode(embedded_text())
        split = int(len(tokens) * (1 - EVAL_FRACTION))
        tokens = tokens[:split] if config.is_training else tokens[split:]
        return WindowDataset(tokens, config.seq_len, config.seed, whole=config.whole_split)
    if config.source == "synthetic":
        return SyntheticDataset(vocab_size, config.seq_len, config.seed)
    if config.source == "c4":
        try:
            from pax.data import c4  # grain: the C4 path only
        except ImportError as e:
            raise UsageError(
                f"DATA_SOURCE=c4 needs grain ({e}); it is in release 1.5.0 and later: "
                "./noxw -s train -- 1.5.0 ..."
            ) from e
        tokenizer = tokenizers.build(config.tokenizer_path)
        if vocab_size < tokenizer.vocab_size:
            raise UsageError(
                f"the tokenizer has {tokenizer.vocab_size} ids but VOCAB_SIZE is "
                f"{vocab_size}; --set VOCAB_SIZE={tokenizer.vocab_size}"
            )
        index, count = reader() if reader else (jax.process_index(), jax.process_count())
        return c4.C4Dataset(config, tokenizer, index, count)
    raise UsageError(f"unknown DATA_SOURCE {config.source!r}; use embedded, synthetic or c4")
