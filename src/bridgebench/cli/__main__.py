"""``python -m bridgebench.cli``."""

import sys

from bridgebench.cli import main

sys.exit(main())
