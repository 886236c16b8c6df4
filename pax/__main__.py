"""`python -m pax COMMAND`: a dispatcher of the commands that answer without importing jax
(they work in a broken or half-installed environment, and inside the images).

  env [--json]    which environment this is: its release identity and any drift from its lock

The trainer is `python -m pax.main`; each package's commands are `python -m pax.PACKAGE`
(curves, data, launch, releases, images, bisect), every one `pax/PACKAGE/cli.py:main`.
"""

import sys

from pax import envinfo
from pax.errors import UsageError, report

COMMANDS = {"env": envinfo.main}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if not argv or argv[0] not in COMMANDS:
        given = f"unknown command {argv[0]!r}" if argv else "no command"
        return report("python -m pax", UsageError(f"{given}; commands: {', '.join(COMMANDS)}"))
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
