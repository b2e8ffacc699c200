"""Reading a log: the source (path, gzip, text, stream; a path must be a regular file), the chunks
(:data:`CHUNK_BYTES`, lines cut at the chunk end read again with the next one) and :func:`parse_log`."""

from __future__ import annotations

import gc
import gzip
import io
import os
import stat
from typing import Any, BinaryIO, Callable, TextIO

from bridgebench.errors import BridgebenchError
from bridgebench.logs.finish import finish
from bridgebench.logs.parsed import ParsedLog
from bridgebench.logs.state import ParseState

#: Bytes read per chunk; memory is this plus the current line's carry-over plus the steps kept.
CHUNK_BYTES = 4 << 20
#: A "line" longer than this with no newline (binary junk, a progress bar rewriting itself) is cut here.
MAX_LINE_BYTES = 1 << 20


class LogReadError(BridgebenchError):
    """A log that cannot be read as text: empty, binary, or unreadable (the message says which)."""


def _open_source(src: str | os.PathLike | TextIO | BinaryIO) -> tuple[str | None, Any, bool, int | None]:
    """(path or None, binary-or-text reader, whether we own it, size in bytes if known). A path must name a regular
    file: it is opened without blocking and checked (``fstat``) before anything is read, so a FIFO, a device or a
    socket is refused at once instead of hanging or never ending."""
    if isinstance(src, str) and ("\n" in src or len(src) >= 4096 or not os.path.lexists(src)):
        data = src.encode("utf-8", "surrogateescape")
        return None, io.BytesIO(data), True, len(data)
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as err:
            raise LogReadError(f"{path}: cannot be read ({err.strerror or err})") from err
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise LogReadError(f"{path}: {_not_regular(st.st_mode)}, not a regular file: not read")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
        magic = f.read(2)
        f.seek(0)
        if magic == b"\x1f\x8b":
            g = gzip.GzipFile(fileobj=f, mode="rb")
            g.myfileobj = f  # closing the reader closes the file (what gzip.open(path) does)
            return path, g, True, None
        return path, f, True, st.st_size
    return getattr(src, "name", None), src, False, None


def _not_regular(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "a special file"


def _read(reader, n: int) -> bytes:
    data = reader.read(n)
    if isinstance(data, str):
        return data.encode("utf-8", "surrogateescape")
    return data


def parse_log(
    path_or_text: str | os.PathLike | TextIO | BinaryIO,
    *,
    warmup_steps: int = 10,
    min_steps: int = 5,
    skipped_is_nan: bool = True,
    progress: Callable[[int, int | None], None] | None = None,
) -> ParsedLog:
    """Parse one pretraining log in a single streaming pass.

    ``path_or_text``: a :class:`~pathlib.Path` or path string (plain or gzip-compressed, detected by its magic
    bytes), the log text itself (a string with a newline), or an open text or binary stream.  ``warmup_steps`` /
    ``min_steps`` configure the windows in ``ParsedLog.steady`` (:func:`steady_state`: warm-up by iteration number).
    ``skipped_is_nan``: count ``number of skipped iterations > 0`` at loss scale 1 as a ``nan`` signal.
    ``progress(bytes_done, total_bytes_or_None)`` is called after every chunk.

    Outcome: see :func:`bridgebench.logs.signals.decide_outcome` -- the most decisive failure class seen, unless
    the run completed after an in-job restart that followed every failure; otherwise ``completed`` when the final
    iteration or an end-of-training marker was reached, else ``incomplete`` (the log stops before an end).

    The cyclic garbage collector is paused during the parse (and restored after): the parse makes no reference
    cycles, and collections triggered by the hundreds of thousands of steps it creates cost about a quarter of its
    time on a long log.

    Raises:
        LogReadError: the file cannot be opened, is empty, or is binary (a NUL byte in its first 64 KiB).
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(path_or_text, warmup_steps, min_steps, skipped_is_nan, progress)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse(path_or_text, warmup_steps: int, min_steps: int, skipped_is_nan: bool, progress) -> ParsedLog:
    path, reader, own, size = _open_source(path_or_text)
    name = path or "log text"
    S = ParseState(skipped_is_nan)
    done = 0
    carry = b""
    first = True
    rewind = own and size is not None  # a plain file or the log text: seekable, no decompression to redo
    try:
        while True:
            try:
                data = _read(reader, CHUNK_BYTES)
            except (OSError, EOFError, gzip.BadGzipFile) as err:
                raise LogReadError(f"{name}: cannot be read ({err})") from err
            if first:
                first = False
                if not data:
                    raise LogReadError(f"{name}: empty log (0 bytes): nothing to parse")
                if b"\x00" in data[:65536]:
                    raise LogReadError(f"{name}: binary file (NUL bytes), not a text log")
            eof = not data
            buf = carry + data if carry else data
            if eof:
                cut = len(buf)
            else:
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    if len(buf) < MAX_LINE_BYTES:
                        carry = buf
                        continue
                    cut = len(buf)
            if cut:
                S.scan(buf, cut, done)
            if rewind and cut < len(buf):  # read the cut line again with the next chunk instead of copying
                reader.seek(cut - len(buf), io.SEEK_CUR)
                carry = b""
            else:
                carry = buf[cut:]
            done += cut
            if progress is not None:
                progress(done, size)
            if eof:
                break
        S.close_all()
    finally:
        if own:
            reader.close()
    return finish(S, path, done, warmup_steps, min_steps)
