"""``python -m simstore``: the command line (see :mod:`simstore.cli`)."""

import sys

from simstore.cli import main

sys.exit(main())
