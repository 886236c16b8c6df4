import sys

from pax.bisect.cli import main

sys.exit(main())
