import sys

from pax.launch.cli import main

sys.exit(main())
