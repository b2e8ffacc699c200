"""``python -m bridgebench.cli``."""

from bridgebench.cli import entry

entry()
