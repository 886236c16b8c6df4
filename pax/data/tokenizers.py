"""Tokenizers. Byte-level is the default: it needs no vocabulary file."""
import numpy as np


class ByteTokenizer:
  vocab_size = 256

  def encode(self, text: str) -> np.ndarray:
    return np.frombuffer(text.encode('utf-8'), dtype=np.uint8).astype(np.int32)

  def decode(self, ids) -> str:
    return bytes(int(i) for i in ids).decode('utf-8', errors='replace')
