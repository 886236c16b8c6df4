import sys

from pax.releases.cli import main

sys.exit(main())
