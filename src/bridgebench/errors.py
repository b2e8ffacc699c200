"""bridgebench's error base class. Every error bridgebench raises on purpose derives from :class:`BridgebenchError`,
so the CLI catches one class, prints its message (which names the rule that was broken) and exits 2."""

from __future__ import annotations


class BridgebenchError(ValueError):
    """Bad input or a refused action; the message says which rule was broken and how to fix it."""
