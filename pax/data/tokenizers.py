"""Tokenizers. Byte-level is the default: it needs no vocabulary file.

SentencePiece (Pax's C4 runs used a 32k SentencePiece vocabulary) is loaded from a model file;
the sentencepiece package is imported only then.
"""

import gzip
import json
import os
from typing import Optional

import numpy as np

from pax.errors import UsageError


class ByteTokenizer:
    vocab_size = 256
    # Packed documents end with NUL, a byte that text does not contain.
    eos_id = 0

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


class SentencePieceTokenizer:
    """A trained SentencePiece model (`.model` file), e.g. Pax's 32k C4 vocabulary."""

    def __init__(self, model_path: str):
        try:
            import sentencepiece
        except ImportError as e:
            raise UsageError(
                f"TOKENIZER_PATH needs sentencepiece ({e}); it is in release 1.5.0 and later"
            ) from e
        if not os.path.isfile(model_path):
            raise UsageError(
                f"SentencePiece model {model_path} does not exist; give the path of a "
                ".model file (train one with python -m pax.data spm --help), or leave "
                "TOKENIZER_PATH unset for byte-level tokens"
            )
        self.path = model_path
        self._sp = sentencepiece.SentencePieceProcessor(model_file=model_path)
        self.vocab_size = self._sp.get_piece_size()
        self.eos_id = self._sp.eos_id()
        if self.eos_id < 0:
            raise UsageError(
                f"SentencePiece model {model_path} has no end-of-sequence piece; "
                "train it with an eos id (python -m pax.data spm does)"
            )

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._sp.encode(text), dtype=np.int32)

    def decode(self, ids) -> str:
        return self._sp.decode([int(i) for i in ids])


def build(model_path: Optional[str]):
    """SentencePiece from `model_path`; byte-level when it is None."""
    return ByteTokenizer() if model_path is None else SentencePieceTokenizer(model_path)


# Pax's C4 vocabularies follow T5's: pad 0, eos 1, unk 2, no bos.
SPM_IDS = dict(pad_id=0, eos_id=1, unk_id=2, bos_id=-1)


def _texts(paths: list[str]):
    """Text of each line of plain files, or the `text` field of each record of .json.gz shards."""
    for path in paths:
        if path.endswith(".json.gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)["text"]
        else:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        yield line.rstrip("\n")


def train_spm(
    inputs: list[str],
    model_prefix: str,
    vocab_size: int,
    model_type: str = "unigram",
    max_sentences: int = 1_000_000,
) -> str:
    """Trains a SentencePiece model; returns the .model path."""
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(_texts(inputs)),
        model_prefix=model_prefix,
        vocab_size=vocab_size,
        model_type=model_type,
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        character_coverage=1.0,
        minloglevel=2,
        **SPM_IDS,
    )
    return model_prefix + ".model"
