import sys

from pax.images.cli import main

sys.exit(main())
