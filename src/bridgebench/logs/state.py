"""One parse's streaming state: :class:`ParseState`, the concerns stacked on their shared fields --
:class:`~bridgebench.logs.fields.StateFields` < rank labels < signals < memory lines < step pairing < record
assembly < chunk events < line routing. A parse calls :meth:`ParseState.scan` per chunk and
:meth:`ParseState.close_all` at the end (:mod:`bridgebench.logs.reader`)."""

from __future__ import annotations

from bridgebench.logs.routing import LineRouting


class ParseState(LineRouting):
    """Mutable accumulator of one parse (the fields: :class:`~bridgebench.logs.fields.StateFields`)."""
