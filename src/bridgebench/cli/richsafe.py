"""Printing data with rich without reading it as markup.

rich reads ``[...]`` in any string it prints as markup (``[/lustre:/lustre]`` is a closing tag, and a tag that closes
nothing raises ``MarkupError``), in ``Console.print``, in table cells and in a status spinner's text -- the spinner
even when the console's markup is off (rich 13 ``Spinner.update`` calls ``Text.from_markup``). Every bridgebench
console prints with ``markup=False`` and styles through ``style=`` or :class:`rich.text.Text`; progress messages go
to a spinner through :func:`plain`.
"""

from __future__ import annotations

from typing import Any, Callable


def plain(update: Callable[..., Any]) -> Callable[[Any], None]:
    """A progress callback that hands ``update`` (``Status.update``) its message as plain text."""
    from rich.text import Text

    def say(message: Any) -> None:
        update(Text(str(message)))

    return say
