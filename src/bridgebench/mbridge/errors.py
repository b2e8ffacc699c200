"""The Megatron-Bridge adapter's error (:class:`BuildError`), apart so that ``build`` and ``provider`` need not import
each other."""

from __future__ import annotations

from bridgebench.errors import BridgebenchError


class BuildError(BridgebenchError):
    """Megatron-Bridge rejected the configuration (its message is kept) or a field does not exist there."""
