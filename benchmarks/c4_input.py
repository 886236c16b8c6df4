"""C4 input pipeline speed against what the trainer consumes, measured in one process.

  ./noxw -s bench_c4 -- [RELEASE] [--data_dir DIR] [--tokenizer MODEL] [--seconds S] [--json F]

Without --data_dir it writes C4-format shards of English text (pax.data sample) to a temporary
directory; without --tokenizer it trains a SentencePiece model on them (4k pieces: as many as
that text supports). For each
tokenizer the pipeline (pax.data.c4, as the trainer builds it: 8 shards interleaved, a prefetch
thread) is timed at the tiny C4 experiment's batch and at the 1B experiment's per-host batch
(32 rows per chip x 4 chips of a TPU v4 host, 1024 tokens). Consumption: the tiny experiment's
trainer measured here (with this pipeline feeding it), and the 1B experiment's analytic FLOPs
per token at this machine's measured peak (an upper bound: 100% MFU) and on a TPU v4 host.
"""

import argparse
import json
import os
import statistics
import tempfile
import time

import jax

from benchmarks import figures
from pax.data import c4, tokenizers
from pax.data.tokenizers import train_spm
from pax.errors import ExitingArgumentParser
from pax.experiments.config import DatasetConfig
from pax.tasks.lm.params.c4 import C4Spmd1BAdam4Replicas, C4SpmdTinyAdam1Replica
from pax.train import loop, mfu
from pax.train.instantiate import instantiate

TPU_V4_HOST_CHIPS = 4
ASSUMED_MFU = 0.5  # for the 1B run's need on TPU v4; Pax-scale runs reach 40-60%


def pipeline_tokens_per_s(
    data_dir, tokenizer, rows: int, seq_len: int, seconds: float, repeats: int = 3
) -> list[float]:
    """Tokens/s out of a fresh training pipeline, after its first batch (start-up) is out."""
    config = DatasetConfig(
        name="train", source="c4", is_training=True, seq_len=seq_len, seed=0, data_dir=data_dir
    )
    dataset = c4.C4Dataset(config, tokenizer)
    dataset.batch(0, rows)
    index, rates = 1, []
    for _ in range(repeats):
        start, tokens = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            tokens += dataset.batch(index, rows)["targets"].size
            index += 1
        rates.append(tokens / (time.perf_counter() - start))
    return rates


def tiny_trainer_tokens_per_s(data_dir: str, job_dir: str, steps: int = 10) -> float:
    """The tiny C4 experiment's own tokens_per_s (compilation excluded), fed by the pipeline."""
    exp = type(
        "Bench",
        (C4SpmdTinyAdam1Replica,),
        {
            "DATA_DIR": data_dir,
            "NUM_TRAIN_STEPS": 2 * steps,
            "SUMMARY_EVERY_N_STEPS": steps,
            "EVAL_EVERY_N_STEPS": 10**6,
        },
    )
    loop.train(
        instantiate(exp(), devices=jax.devices()[:1]),
        job_dir,
        "benchmarks.C4Tiny",
        checkpoint_saving=False,
    )
    with open(os.path.join(job_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if r["split"] == "train"][-1]["tokens_per_s"]


def one_b_needs() -> dict:
    task = C4Spmd1BAdam4Replicas().task()
    per_token = mfu.flops_per_token(task.model, task.model.seq_len)
    here = mfu.measure_matmul_peak("float32")
    return {
        "flops_per_token": per_token,
        "peak_here": here,
        "here_at_100pct_mfu": here / per_token,
        "tpu_v4_host": TPU_V4_HOST_CHIPS
        * mfu.PEAK_FLOPS_BY_DEVICE_KIND["TPU v4"]
        * ASSUMED_MFU
        / per_token,
        "rows_per_host": task.train.percore_batch_size * TPU_V4_HOST_CHIPS,
        "seq_len": task.model.seq_len,
    }


def measure(data_dir, tokenizer_path, seconds: float, tmp: str) -> dict:
    if data_dir is None:
        data_dir = os.path.join(tmp, "c4")
        c4.write_sample_shards(data_dir, train_shards=8, validation_shards=1, docs_per_shard=1000)
    if tokenizer_path is None:
        shards = c4.list_shards(data_dir, "train")
        tokenizer_path = train_spm(shards[:2], os.path.join(tmp, "spm4k"), 4000)
    need = one_b_needs()
    tiny = C4SpmdTinyAdam1Replica().task()
    tiny_rows, tiny_seq = tiny.train.percore_batch_size, tiny.model.seq_len
    results = {
        "data_dir": data_dir,
        "train_shards": len(c4.list_shards(data_dir, "train")),
        "cpus": os.cpu_count(),
        "one_b": need,
        "pipeline": {},
    }
    for name, path in (("byte-level", None), ("sentencepiece", tokenizer_path)):
        tok = tokenizers.build(path)
        label = name if path is None else f"{name} {tok.vocab_size}"
        results["pipeline"][label] = {
            "tiny": pipeline_tokens_per_s(data_dir, tok, tiny_rows, tiny_seq, seconds),
            "1b": pipeline_tokens_per_s(
                data_dir, tok, need["rows_per_host"], need["seq_len"], seconds
            ),
        }
    results["tiny_trainer"] = tiny_trainer_tokens_per_s(data_dir, os.path.join(tmp, "job"))
    results["tiny_shape"] = (tiny_rows, tiny_seq)
    return results


def report(r: dict) -> str:
    need = r["one_b"]
    lines = [
        f"C4 input pipeline: {r['train_shards']} train shards under {r['data_dir']}, "
        f"{r['cpus']} CPUs; median (min-max) of 3 timed windows",
        f"  consumers: tiny C4 trainer measured here {r['tiny_trainer']:,.0f} tokens/s; "
        f"1B ({need['flops_per_token']:.3g} FLOP/token) here at 100% MFU of "
        f"{need['peak_here']:.3g} FLOP/s: {need['here_at_100pct_mfu']:,.1f} tokens/s; "
        f"1B per TPU v4 host ({TPU_V4_HOST_CHIPS} chips, {ASSUMED_MFU:.0%} MFU): "
        f"{need['tpu_v4_host']:,.0f} tokens/s",
    ]
    for label, rates in r["pipeline"].items():
        for key, shape, consumer, need_rate in (
            ("tiny", r["tiny_shape"], "tiny trainer here", r["tiny_trainer"]),
            (
                "1b",
                (need["rows_per_host"], need["seq_len"]),
                "1B on a TPU v4 host",
                need["tpu_v4_host"],
            ),
        ):
            med = statistics.median(rates[key])
            lines.append(
                f"  {label:18s} {shape[0]:4d} x {shape[1]:<5d} {med:12,.0f} tokens/s "
                f"({min(rates[key]):,.0f}-{max(rates[key]):,.0f}) = "
                f"{med / need_rate:,.1f}x {consumer}"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = ExitingArgumentParser(
        prog="./noxw -s bench_c4 --",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data_dir", help="C4 shards (default: generated sample shards)")
    parser.add_argument("--tokenizer", help="SentencePiece model (default: trains 4k pieces)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one timed window")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = measure(args.data_dir, args.tokenizer, args.seconds, tmp)
    print(report(results))
    figures.write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
