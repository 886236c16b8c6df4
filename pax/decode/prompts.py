"""Prompts: where they come from, how they become token batches, how completions become text.

Sources: `--prompt TEXT` (repeatable), `--prompts FILE` (one prompt per line; a `.jsonl` file
holds one JSON object with a "prompt" string per line, for prompts that span lines), or, with
neither, the experiment's decode set (Pax's decode_datasets): the beginnings of documents of
its eval split.

Batches are left-padded to a shape bucket: the smallest power of two (at least MIN_BUCKET) that
holds the batch's longest prompt, capped at SEQ_LEN, so a handful of compiled decoders serve
any mix of prompt lengths.
"""

import dataclasses
import gzip
import json
import os
import re

import numpy as np

from pax.data.corpus import embedded_text
from pax.data.sources import EVAL_FRACTION
from pax.decode.generate import Prompts
from pax.errors import UsageError
from pax.experiments.config import DatasetConfig

MIN_BUCKET = 16
_PROSE = re.compile(r"[A-Z][a-z]* [a-z]+ [^\n]{30}")  # a sentence's start, 40+ characters


@dataclasses.dataclass(frozen=True)
class Prompt:
    text: str
    ids: np.ndarray  # what the model is fed (int32)


def read_file(path: str) -> list[str]:
    """Prompts from a text file (one a line, blank lines skipped) or a .jsonl file."""
    if not os.path.isfile(path):
        raise UsageError(f"--prompts {path}: no such file; give a text file with one prompt a line")
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not path.endswith(".jsonl"):
        return [line for line in lines if line.strip()]
    texts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}:{number}: not JSON ({e.msg}); one object a line") from None
        if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
            raise UsageError(f'{path}:{number}: no string field "prompt"')
        texts.append(record["prompt"])
    return texts


def from_dataset(config: DatasetConfig, tokenizer, count: int, length: int) -> list[str]:
    """`count` prompt texts from a dataset's documents, each about `length` tokens long."""
    if config.source == "embedded":
        text = embedded_text()
        held_out = text[int(len(text) * (1 - EVAL_FRACTION)) :]
        # The held-out text is reference documentation: headings, grammar rules and tables
        # start many of its paragraphs. A paragraph that opens with a sentence makes a prompt a
        # reader can judge the continuation of.
        docs = [p for p in held_out.split("\n\n") if _PROSE.match(p)]
        docs = [docs[i * len(docs) // count] for i in range(min(count, len(docs)))]
    elif config.source == "c4":
        from pax.data import c4  # noqa: PLC0415  (grain: the C4 path only)

        docs = []
        for shard in c4.list_shards(config.data_dir, "validation"):
            with gzip.open(shard, "rt", encoding="utf-8") as f:
                docs += [json.loads(line)["text"] for _, line in zip(range(count - len(docs)), f)]
            if len(docs) >= count:
                break
    elif config.source == "synthetic":
        rng = np.random.default_rng(config.seed)
        return [
            tokenizer.decode(rng.integers(1, tokenizer.vocab_size, length)) for _ in range(count)
        ]
    else:
        raise UsageError(f"no decode prompts for DATA_SOURCE={config.source!r}; give --prompt")
    return [_cut(doc, tokenizer, length) for doc in docs]


def _cut(text: str, tokenizer, length: int) -> str:
    """The first `length` tokens of text, shortened to the last whole word."""
    head = tokenizer.decode(tokenizer.encode(text)[:length])
    if len(head) < len(text) and " " in head.strip():
        head = head[: head.rstrip().rindex(" ")]
    return head


def encode(texts: list[str], tokenizer, starts_with_eos: bool, max_len: int) -> list[Prompt]:
    """Token ids of each prompt; UsageError for an empty one or one longer than max_len.

    starts_with_eos: the model saw every document start after an EOS token (C4's packing), so
    prompts begin with one too.
    """
    prompts = []
    for i, text in enumerate(texts):
        ids = np.asarray(tokenizer.encode(text), np.int32)
        if starts_with_eos:
            ids = np.concatenate([[tokenizer.eos_id], ids]).astype(np.int32)
        if not len(ids):
            raise UsageError(f"prompt {i} is empty; give at least one character to continue")
        if len(ids) > max_len:
            raise UsageError(
                f"prompt {i} is {len(ids)} tokens, longer than SEQ_LEN={max_len}, the longest "
                f"sequence the model was trained on; shorten it ({text[:40]!r}...)"
            )
        prompts.append(Prompt(text, ids))
    return prompts


def bucket(length: int, max_len: int) -> int:
    size = MIN_BUCKET
    while size < length:
        size *= 2
    return min(size, max_len)


def batches(prompts: list[Prompt], batch_size: int, multiple: int, max_len: int):
    """(indices, Prompts) per batch of up to batch_size prompts, in order, rows filled up to a
    multiple of `multiple` with one-token filler prompts (their rows are -1)."""
    rows = -(-min(batch_size, len(prompts)) // multiple) * multiple
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        indices = list(range(start, start + len(chunk)))
        length = bucket(max(len(p.ids) for p in chunk), max_len)
        tokens = np.zeros((rows, length), np.int32)
        positions = np.zeros((rows, length), np.int32)
        segment_ids = np.zeros((rows, length), np.int32)
        row_ids = np.full(rows, -1, np.int32)
        for r in range(rows):
            ids = chunk[r].ids if r < len(chunk) else np.zeros(1, np.int32)
            n = len(ids)
            tokens[r, length - n :] = ids
            positions[r, length - n :] = np.arange(n)
            segment_ids[r, length - n :] = 1
            if r < len(chunk):
                row_ids[r] = indices[r]
        yield indices, Prompts(tokens, positions, segment_ids, row_ids)


def completion_text(tokenizer, prompt_ids, new_ids) -> str:
    """The text the new tokens add to the prompt's.

    Decoded together with the prompt and cut where the prompt's own text ends (their common
    start): a UTF-8 character or a SentencePiece word split across the boundary comes out as
    it reads in the full text.
    """
    prompt = tokenizer.decode(prompt_ids)
    both = tokenizer.decode(list(prompt_ids) + list(new_ids))
    common = 0
    for a, b in zip(prompt, both):
        if a != b:
            break
        common += 1
    return both[common:]
