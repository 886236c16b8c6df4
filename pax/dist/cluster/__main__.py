import sys

from pax.dist.cluster import main

sys.exit(main())
