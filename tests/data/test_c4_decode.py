"""Decoding a SentencePiece C4 run: prompts from its validation split, text back out."""

import json

import jax
import pytest

pytest.importorskip("grain")  # release 1.5.0 on

from pax.data import tokenizers  # noqa: E402
from pax.decode import decoder as decoder_lib  # noqa: E402
from pax.decode.options import Options  # noqa: E402
from pax.errors import UsageError  # noqa: E402
from pax.train import job_config, loop  # noqa: E402
from pax.train.instantiate import instantiate  # noqa: E402
from tests.data.test_c4_train import TinyC4  # noqa: E402
from tests.helpers import derive  # noqa: E402


def _decoder(experiment_cls, job, **options):
    run = instantiate(experiment_cls(), devices=jax.devices()[:1], with_data=False)
    return decoder_lib.Decoder(run, str(job), Options(**options), need_checkpoint=True)


@pytest.fixture(scope="module")
def spm_run(shards, spm_model, tmp_path_factory):
    experiment = derive(TinyC4, DATA_DIR=str(shards), TOKENIZER_PATH=spm_model, VOCAB_SIZE=300)
    job = tmp_path_factory.mktemp("spm") / "job"
    loop.train(instantiate(experiment(), devices=jax.devices()[:1]), str(job), "tests.TinyC4")
    return experiment, job


def test_sentencepiece_prompts_and_completions(spm_run, spm_model, capsys):
    experiment, job = spm_run
    tokenizer = tokenizers.build(spm_model)
    decoder = _decoder(experiment, job, num_prompts=2, prompt_tokens=12, max_new_tokens=6)
    assert decoder.name == "c4"
    records = decoder_lib.decode_once(decoder)
    out = job / "decoder_out" / "c4" / "decoder_out_6_shard_0.jsonl"
    assert [json.loads(line) for line in out.read_text().splitlines()] == records
    assert len(records) == 2
    for r in records:
        # The beginning of a validation document, after the EOS every C4 document starts with.
        assert r["prompt_tokens"] == len(tokenizer.encode(r["prompt"])) + 1 <= 13
        assert isinstance(r["completion"], str)
        assert r["completion_tokens"] + (r["stop"] == "eos") <= 6
    printed = capsys.readouterr().out
    assert printed.startswith("checkpoint_00000006, greedy: 2 prompt(s)")
    assert records[0]["prompt"] in printed


def test_a_byte_level_run_refuses_a_sentencepiece_tokenizer(shards, spm_model, tmp_path):
    byte_level = derive(TinyC4, DATA_DIR=str(shards))
    job = tmp_path / "job"
    # The run's config.json, as training writes it, is all the decoder's check reads.
    job.mkdir()
    run = instantiate(byte_level(), devices=jax.devices()[:1], with_data=False)
    config = job_config.as_written(loop._config(run, "tests.TinyC4"))
    (job / job_config.FILE).write_text(json.dumps(config))
    with pytest.raises(UsageError) as e:
        _decoder(derive(byte_level, TOKENIZER_PATH=spm_model), job, prompts=("x",))
    assert "trained with byte-level tokens" in str(e.value)
    assert "SentencePiece c4_300.model" in str(e.value)
