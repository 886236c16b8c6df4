import sys

from pax.launch.render import main

sys.exit(main())
