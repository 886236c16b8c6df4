import sys

from pax.curves.cli import main

sys.exit(main())
