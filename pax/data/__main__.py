import sys

from pax.data.cli import main

sys.exit(main())
