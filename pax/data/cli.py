"""Data commands: `python -m pax.data {sample,spm,inspect} ...` (also `./noxw -s data -- ...`).

sample   write small C4-format shards (English text CPython ships) to try the C4 experiments
spm      train a SentencePiece model from text files and/or C4 shards
inspect  decoded examples, tokens per document and total tokens of a C4 split
"""

import argparse
import sys

import numpy as np

from pax.data.tokenizers import train_spm
from pax.errors import ExitingArgumentParser, UsageError, report


def inspect(
    data_dir: str, split: str, tokenizer_path, examples: int, documents: int, seq_len: int, out=None
) -> dict:
    """Reads the split's documents in shard order; prints examples and token statistics."""
    out = out or sys.stdout
    from pax.data import c4, tokenizers

    tokenizer = tokenizers.build(tokenizer_path)
    shards = c4.list_shards(data_dir, split)
    print(
        f"{len(shards)} {split} shards under {data_dir}; tokenizer "
        f"{getattr(tokenizer, 'path', 'byte-level')} ({tokenizer.vocab_size} ids, "
        f"eos {tokenizer.eos_id})",
        file=out,
    )
    lengths = []
    for unit in c4.units_of(shards, 0, 1):
        for record in c4.UnitDataset(unit, skip_bad=False):
            tokens = tokenizer.encode(record["text"])
            if len(lengths) < examples:
                shown = tokenizer.decode(tokens[:60]).replace("\n", " / ")
                print(
                    f"--- document {len(lengths) + 1}: {len(tokens)} tokens\n{shown}"
                    f"{' ...' if len(tokens) > 60 else ''}",
                    file=out,
                )
            lengths.append(len(tokens) + 1)  # + EOS, as packed
            if len(lengths) == documents:
                break
        if len(lengths) == documents:
            break
    lengths = np.array(lengths)
    stats = {
        "documents": len(lengths),
        "total_tokens": int(lengths.sum()),
        "mean": float(lengths.mean()),
        "median": float(np.median(lengths)),
        "p90": float(np.percentile(lengths, 90)),
        "max": int(lengths.max()),
        "rows": int(np.ceil(lengths.sum() / seq_len)),
    }
    scope = (
        "all documents"
        if len(lengths) < documents or documents == 0
        else f"the first {len(lengths)} documents (--documents 0 reads all)"
    )
    print(
        f"--- {scope}\ntokens per document (with EOS): mean {stats['mean']:.1f}, median "
        f"{stats['median']:.0f}, p90 {stats['p90']:.0f}, max {stats['max']}\n"
        f"total tokens: {stats['total_tokens']} = {stats['rows']} packed rows of {seq_len}",
        file=out,
    )
    return stats


def main(argv=None) -> int:
    parser = ExitingArgumentParser(
        prog="python -m pax.data",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    sample = commands.add_parser("sample", help="write small C4-format shards")
    sample.add_argument("--out", required=True, help="directory to write the shards to")
    sample.add_argument("--train_shards", type=int, default=4)
    sample.add_argument("--validation_shards", type=int, default=1)
    sample.add_argument("--docs_per_shard", type=int, default=256)
    spm = commands.add_parser("spm", help="train a SentencePiece model")
    spm.add_argument(
        "inputs",
        nargs="+",
        help="text files (one sentence or document per line) and/or C4 .json.gz shards",
    )
    spm.add_argument("--model_prefix", required=True, help="writes PREFIX.model and PREFIX.vocab")
    spm.add_argument("--vocab_size", type=int, default=32000)
    spm.add_argument("--model_type", default="unigram", choices=["unigram", "bpe", "char", "word"])
    spm.add_argument(
        "--max_sentences", type=int, default=1_000_000, help="lines sampled for training"
    )
    look = commands.add_parser("inspect", help="examples and token counts of a C4 split")
    look.add_argument("--data_dir", required=True)
    look.add_argument("--split", default="train", choices=["train", "validation"])
    look.add_argument("--tokenizer", help="SentencePiece .model (default: byte-level)")
    look.add_argument("--examples", type=int, default=3)
    look.add_argument("--documents", type=int, default=10000, help="documents to read; 0: all")
    look.add_argument("--seq_len", type=int, default=1024)
    args = parser.parse_args(argv)
    try:
        if args.command == "sample":
            from pax.data import c4

            for path in c4.write_sample_shards(
                args.out, args.train_shards, args.validation_shards, args.docs_per_shard
            ):
                print(path)
        elif args.command == "spm":
            print(
                train_spm(
                    args.inputs,
                    args.model_prefix,
                    args.vocab_size,
                    args.model_type,
                    args.max_sentences,
                )
            )
        else:
            inspect(
                args.data_dir,
                args.split,
                args.tokenizer,
                args.examples,
                args.documents,
                args.seq_len,
            )
    except (UsageError, OSError, RuntimeError) as e:  # RuntimeError: sentencepiece training
        return report("pax data", UsageError(str(e)))
    return 0
