"""What the terminal shows: answers and bridgebench's own errors; third-party chatter goes to the debug log
(:mod:`bridgebench.debuglog`), ``--verbose`` shows it as it happens.

An exception that is not a :class:`bridgebench.errors.BridgebenchError` is a bug or an environment problem, not bad
input: the terminal gets its cause in one line (type, message, and the innermost frame that raised it) and where the
full traceback was written; ``--verbose`` prints the traceback too. Exit code 1.
"""

from __future__ import annotations

import logging
import traceback

import typer

from bridgebench import debuglog

log = logging.getLogger("bridgebench.cli")


def configure(verbose: bool) -> None:
    """Route logging and warnings for this command (:func:`bridgebench.debuglog.configure`)."""
    debuglog.configure(verbose=verbose)


def unexpected(err: BaseException) -> int:
    """Report an unexpected exception: one line with its cause on stderr, the traceback in the debug log (and on
    stderr with ``--verbose``). Returns the exit code (1)."""
    text = "".join(traceback.format_exception(err))
    log.debug("unexpected error:\n%s", text)
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno}, in {frames[-1].name})" if frames else ""
    if debuglog.is_verbose():
        typer.echo(text, err=True)
    path = debuglog.log_path()
    typer.secho(
        f"error: unexpected {type(err).__name__}: {err}{where}\n"
        f"  this is a bug or an environment problem, not your input; the traceback is in {path} "
        "(bridgebench --verbose ... prints it here)",
        fg=typer.colors.RED,
        err=True,
    )
    return 1
