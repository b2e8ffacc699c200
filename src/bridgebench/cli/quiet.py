"""What the terminal shows: answers and bridgebench's own errors; third-party chatter goes to the debug log
(:mod:`bridgebench.debuglog`), ``--verbose`` shows it as it happens.

An exception that is not a :class:`bridgebench.errors.BridgebenchError` is a bug or an environment problem, not bad
input: the terminal gets its cause in one line (type, message, and the innermost frame that raised it) and where the
full traceback was written; ``--verbose`` prints the traceback too. Exit code 1.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
from typing import NoReturn

import typer

from bridgebench import debuglog

log = logging.getLogger("bridgebench.cli")


def configure(verbose: bool) -> None:
    """Route logging and warnings for this command (:func:`bridgebench.debuglog.configure`), the debug log scrubbed
    of credentials like everything the command prints (:func:`bridgebench.cli.redaction.scrub`)."""
    from bridgebench.cli.redaction import scrub

    debuglog.configure(verbose=verbose, scrub=scrub)


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


def missing_value(err: BaseException) -> str | None:
    """The message of rule ``config_value_missing`` when ``err`` is OmegaConf's ``MissingMandatoryValue`` (a config
    value left ``???``, OmegaConf's "must be set" marker, was read), else None. omegaconf is looked up in
    ``sys.modules`` only: an error of it cannot arise unless it was imported."""
    errors = sys.modules.get("omegaconf.errors")
    if errors is None or not isinstance(err, errors.MissingMandatoryValue):
        return None
    key = getattr(err, "full_key", None) or "a config value"
    return (
        f"rule config_value_missing: {key} is '???' (OmegaConf's marker for a value you must set) and this command "
        f"needs it; set it with an override, e.g. {key}=<value>, or in your config file"
    )


#: Libraries whose teardown at interpreter exit costs noticeable CPU (see :func:`finish`).
HEAVY_MODULES = ("torch", "pandas", "matplotlib")


def finish(code: int) -> NoReturn:
    """Exit the process with ``code``.

    A command that imported torch (the Megatron-Bridge commands: plan, submit, sweep, diff-config) would spend about
    3 s of CPU after its work in the interpreter's teardown -- freeing the module graph of torch, transformers and
    Megatron -- that nobody waits for; one that imported pandas or matplotlib (table, compare) about 0.4 s. There,
    after everything an exit must do (other non-daemon threads joined, ``atexit`` callbacks run -- logging's flush
    and close among them --, stdout and stderr flushed), the process ends with ``os._exit``. Other commands exit
    normally.
    """
    if not any(heavy in sys.modules for heavy in HEAVY_MODULES):
        sys.exit(code)
    import atexit

    try:
        for t in threading.enumerate():
            if t is not threading.main_thread() and not t.daemon:
                t.join()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001  (a closed pipe: nothing more to say)
                pass
        os._exit(code)
