"""`python -m benchmarks.decode`: decoding with the KV cache against recomputing the prefix."""

import json

import benchmarks.decode
from benchmarks import figures, table
from benchmarks.decode import roofline
from benchmarks.decode.measure import measure, report
from pax.errors import ExitingArgumentParser


def main(argv=None) -> int:
    parser = ExitingArgumentParser(
        prog="python -m benchmarks.decode", description=benchmarks.decode.__doc__.splitlines()[0]
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="a tiny model (for tests)")
    parser.add_argument(
        "--roofline",
        action="store_true",
        help="the cached step against the memory roofline at the 0.55B bench shapes "
        "(benchmarks/decode/roofline.py) instead of the cache against recomputing",
    )
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16], help="with --roofline")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens, with --roofline")
    parser.add_argument("--new", type=int, default=256, help="new tokens, with --roofline")
    parser.add_argument(
        "--record-json",
        metavar="FILE",
        help="measure nothing: store a --roofline --json record from an accelerator in "
        f"{table.BENCH_JSON.relative_to(table.ROOT)} (replacing the same device's)",
    )
    figures.add_json_flag(parser)
    args = parser.parse_args(argv)
    if args.record_json:
        with open(args.record_json) as f:
            result = json.load(f)
        if result.get("kind") != table.DECODE or result["device"].startswith("cpu"):
            parser.error(f"{args.record_json} is not a --roofline record from an accelerator")
        table.record_decode(result)
        print(f"recorded {result['device']} in {table.BENCH_JSON.relative_to(table.ROOT)}")
        return 0
    if args.roofline:
        if args.new < 2:
            parser.error("--new must be at least 2: a step's time is (new - 1) steps' own")
        result = roofline.measure(args.small, args.batch, args.prompt, args.new, args.repeats)
        print(roofline.report(result))
    else:
        result = measure(args.small, args.repeats)
        print(report(result))
    figures.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
