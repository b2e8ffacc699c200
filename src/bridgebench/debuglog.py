"""Where third-party chatter goes: a debug log, not the terminal.

Importing Megatron-Bridge and building a ``ConfigContainer`` makes third-party libraries print import tracebacks
(Megatron-Bridge's ``safe_import_from`` of Transformer Engine symbols), warnings (torch's "No CUDA runtime is
found", transformers' ``torch_dtype`` deprecation, Megatron-Bridge's ``trust_remote_code`` notice) and INFO lines,
through Python warnings, their own logging handlers or plain writes to stdout/stderr. A newcomer reads a traceback
as a failure; none of these is one. So the ``bridgebench`` command (:func:`configure`):

- sends every log record (INFO and up; bridgebench's own from DEBUG) and every Python warning to the debug log, the file
  ``configs/paths``' ``debug_log`` (default ``.state/bridgebench-debug.log``, ``BRIDGEBENCH_DEBUG_LOG`` moves it;
  rotated at 10 MB, one old copy kept);
- shows on stderr only bridgebench's own warnings -- or, with ``--verbose``, everything, as it happens;
- runs the noisy steps (:func:`captured`: the Megatron import in :func:`bridgebench.mbridge.setup`, each build)
  with ``sys.stdout``/``sys.stderr`` pointed at the debug log, and afterwards routes the loggers third-party
  libraries gave their own terminal handlers through the same place (:func:`adopt_loggers`).

bridgebench's own errors are unaffected: the CLI prints them (and an unexpected exception's type, message and the
debug log's path: the cause, never a bare traceback). Used as a library (tests, notebooks), nothing changes until
:func:`configure` is called. Bottom layer: imports nothing from bridgebench but :mod:`bridgebench.paths`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import logging.handlers
import sys
import warnings
from pathlib import Path
from typing import Iterator

#: The logger of bridgebench's own messages; its WARNING and up reach the terminal without ``--verbose``.
ROOT_NAME = "bridgebench"
#: Text written to stdout/stderr inside :func:`captured` is logged under this name (DEBUG).
CAPTURED_NAME = "bridgebench.captured"
_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"

_state: dict = {"configured": False, "verbose": False, "path": None, "terminal": None, "scrub": None}


class _ScrubbingFormatter(logging.Formatter):
    """Formats a record, then passes the whole text (message, traceback, captured output) through the scrubber set
    by :func:`configure` (the CLI's :func:`bridgebench.cli.redaction.scrub`): the debug log is a file bridgebench
    writes, so no credential-shaped text may land in it either."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        scrub = _state["scrub"]
        return scrub(text) if scrub is not None else text


def log_path() -> Path:
    """The debug log file (``configs/paths`` ``debug_log``; environment override applied at call time)."""
    from bridgebench.paths import load_paths

    return load_paths().debug_log


class _OwnRecords(logging.Filter):
    """Only records of bridgebench's own loggers (the terminal handler without ``--verbose``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return (record.name == ROOT_NAME or record.name.startswith(ROOT_NAME + ".")) and record.name != CAPTURED_NAME


def configure(verbose: bool = False, path: Path | None = None, scrub=None) -> Path | None:
    """Route logging and warnings as the module docstring says; returns the debug log path (None if it cannot be
    opened: then records go nowhere but the terminal rules still hold). ``scrub`` (``str -> str``) is applied to
    every line written to the debug log. Idempotent; a second call can switch ``verbose`` on."""
    if scrub is not None:
        _state["scrub"] = scrub
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_bridgebench", False)]:
        root.removeHandler(handler)
        handler.close()
    path = Path(path) if path is not None else log_path()
    file_handler: logging.Handler | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=10_000_000, backupCount=1, encoding="utf-8", delay=True
        )
    except OSError:
        path = None
    if file_handler is not None:
        file_handler.setLevel(logging.DEBUG)
        file_handler.setFormatter(_ScrubbingFormatter(_FORMAT))
        file_handler._bridgebench = True  # type: ignore[attr-defined]
        root.addHandler(file_handler)
    terminal = logging.StreamHandler(sys.stderr)
    terminal._bridgebench = True  # type: ignore[attr-defined]
    if verbose:
        terminal.setLevel(logging.DEBUG)
        terminal.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    else:
        terminal.setLevel(logging.WARNING)
        terminal.addFilter(_OwnRecords())
        terminal.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root.addHandler(terminal)
    root.setLevel(logging.INFO)  # libraries' DEBUG records stay off (cost, volume); bridgebench's own are kept
    logging.getLogger(ROOT_NAME).setLevel(logging.DEBUG)
    logging.captureWarnings(True)
    warnings.simplefilter("default")  # each distinct warning once, into the debug log
    _state.update(configured=True, verbose=verbose, path=path, terminal=terminal)
    adopt_loggers()
    return path


def is_verbose() -> bool:
    return bool(_state["verbose"])


def adopt_loggers() -> None:
    """Route third-party loggers that print to the terminal themselves (their own ``StreamHandler`` on stdout or
    stderr, ``propagate`` off: transformers, torch) through the root logger, i.e. the debug log (and the terminal
    with ``--verbose``). bridgebench's loggers are left as they are. No-op before :func:`configure`."""
    if not _state["configured"]:
        return
    streams = {sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or name == ROOT_NAME or name.startswith(ROOT_NAME + "."):
            continue
        own = [
            h
            for h in logger.handlers
            if isinstance(h, logging.StreamHandler)
            and not isinstance(h, logging.FileHandler)
            and (getattr(h, "stream", None) in streams or isinstance(getattr(h, "stream", None), _Capture))
        ]
        for handler in own:
            logger.removeHandler(handler)
        if own:
            logger.propagate = True


class _Capture(io.TextIOBase):
    """A text stream that logs each complete line under :data:`CAPTURED_NAME` at DEBUG."""

    def __init__(self) -> None:
        self._buf = ""
        self._log = logging.getLogger(CAPTURED_NAME)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._buf += text
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            if line.strip():
                self._log.debug(line)
        return len(text)

    def flush(self) -> None:
        if self._buf.strip():
            self._log.debug(self._buf)
        self._buf = ""

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def captured() -> Iterator[None]:
    """Inside, ``sys.stdout``/``sys.stderr`` writes go to the debug log (DEBUG records of :data:`CAPTURED_NAME`);
    afterwards third-party loggers created meanwhile are adopted (:func:`adopt_loggers`). A no-op before
    :func:`configure` or with ``--verbose``. Progress displays created before (rich consoles holding the real
    stream) keep drawing."""
    if not _state["configured"] or _state["verbose"]:
        yield
        return
    stream = _Capture()
    try:
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            yield
    finally:
        stream.flush()
        adopt_loggers()
