"""Prompt files, tokens, batches (left padding, positions, segments, buckets) and completions."""

import numpy as np
import pytest

from pax.data.tokenizers import ByteTokenizer
from pax.decode import prompts as prompts_lib
from pax.errors import UsageError
from pax.experiments.config import DatasetConfig

BYTES = ByteTokenizer()


def test_batches_left_pad_to_a_power_of_two_bucket():
    prompts = prompts_lib.encode(["hello", "a", "seventeen letters"], BYTES, False, 64)
    ((indices, batch),) = prompts_lib.batches(prompts, 8, 4, 64)
    assert indices == [0, 1, 2]
    assert batch.tokens.shape == (4, 32)  # 3 prompts + 1 filler row; 17 tokens -> bucket 32
    assert batch.rows.tolist() == [0, 1, 2, -1]
    row = 0
    assert bytes(batch.tokens[row, -5:].tolist()).decode() == "hello"
    assert (batch.tokens[row, :-5] == 0).all()
    assert batch.positions[row, -5:].tolist() == [0, 1, 2, 3, 4]
    assert batch.segment_ids[row].tolist() == [0] * 27 + [1] * 5
    # Every row's last token is in the last slot: one prefill gives every row's next logits.
    assert (batch.segment_ids[:, -1] == 1).all()
    assert batch.positions[1, -1] == 0 and batch.positions[2, -1] == 16


def test_buckets_and_batch_size():
    assert [prompts_lib.bucket(n, 128) for n in (1, 16, 17, 100, 128)] == [16, 16, 32, 128, 128]
    assert prompts_lib.bucket(70, 100) == 100  # capped at SEQ_LEN
    prompts = prompts_lib.encode([f"prompt {i}" for i in range(5)], BYTES, False, 64)
    batches = list(prompts_lib.batches(prompts, 2, 1, 64))
    assert [b[0] for b in batches] == [[0, 1], [2, 3], [4]]
    assert {b[1].tokens.shape[0] for b in batches} == {2}  # the last one filled up


def test_encode_checks_length_and_adds_eos_where_the_model_expects_one():
    assert prompts_lib.encode(["ab"], BYTES, True, 8)[0].ids.tolist() == [0, 97, 98]
    assert len(prompts_lib.encode(["x" * 8], BYTES, False, 8)[0].ids) == 8
    with pytest.raises(UsageError, match="prompt 1 is 9 tokens, longer than SEQ_LEN=8"):
        prompts_lib.encode(["ok", "x" * 9], BYTES, False, 8)
    with pytest.raises(UsageError, match="prompt 0 is empty"):
        prompts_lib.encode([""], BYTES, False, 8)


def test_prompt_files(tmp_path):
    text = tmp_path / "p.txt"
    text.write_text("first prompt\n\nsecond\n")
    assert prompts_lib.read_file(str(text)) == ["first prompt", "second"]
    lines = tmp_path / "p.jsonl"
    lines.write_text('{"prompt": "two\\nlines"}\n{"prompt": "x"}\n')
    assert prompts_lib.read_file(str(lines)) == ["two\nlines", "x"]
    lines.write_text('{"prompt": "ok"}\n{"text": "x"}\n')
    with pytest.raises(UsageError, match=r'p.jsonl:2: no string field "prompt"'):
        prompts_lib.read_file(str(lines))
    with pytest.raises(UsageError, match="no such file"):
        prompts_lib.read_file(str(tmp_path / "missing.txt"))


def test_completion_text_joins_a_character_split_across_the_boundary():
    prompt = list("caf".encode()) + [0xC3]  # the first byte of "é"
    assert prompts_lib.completion_text(BYTES, prompt, [0xA9, ord("!")]) == "é!"
    assert prompts_lib.completion_text(BYTES, list(b"ab"), list(b"cd")) == "cd"


def test_embedded_decode_set_is_sentences_from_held_out_text():
    from pax.data.corpus import embedded_text
    from pax.data.sources import EVAL_FRACTION

    config = DatasetConfig("embedded", "embedded", False, 128, 0)
    texts = prompts_lib.from_dataset(config, BYTES, 4, 32)
    assert len(texts) == 4 and len(set(texts)) == 4
    text = embedded_text()
    held_out = text[int(len(text) * (1 - EVAL_FRACTION)) :]
    for t in texts:
        assert t in held_out and t[0].isupper()
        assert 10 < len(t.encode()) <= 32 and not t.endswith(" ")
    np.testing.assert_equal(prompts_lib.from_dataset(config, BYTES, 4, 32), texts)
