"""``python -m simstore.cli``: the command line, as ``python -m simstore``."""

import sys

from simstore.cli import main

sys.exit(main())
