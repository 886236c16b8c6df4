"""`python -m benchmarks.decode`: decoding with the KV cache against recomputing the prefix."""

import argparse

import benchmarks.decode
from benchmarks import figures
from benchmarks.decode.measure import measure, report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.decode", description=benchmarks.decode.__doc__.splitlines()[0]
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="a tiny model (for tests)")
    figures.add_json_flag(parser)
    args = parser.parse_args(argv)
    result = measure(args.small, args.repeats)
    print(report(result))
    figures.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
