"""``python -m framebus.pyshmem``: pyshmem's command line (list, unlink, purge)."""

import sys

from .cli import main

sys.exit(main())
