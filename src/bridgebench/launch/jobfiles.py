"""Reading what a job wrote, safely: bounded memory, regular files only, nothing outside the job folder.

A job folder is written by the job (the payload, the training framework, whatever ran on the node), so ``collect``
treats it as untrusted input:

* :func:`refused` lists the entries of an attempt's job folder that are not regular files or folders -- FIFOs,
  devices, sockets (reading one would block forever or never end: ``/dev/zero``) and symlinks that lead out of the
  folder -- by path; ``collect`` leaves such an attempt uncollected and names them;
* :func:`last_marker` finds the last ``<marker><json>`` line of the logs in a streaming pass (memory: one chunk
  plus one marker line of at most :data:`MAX_MARKER_BYTES`), where reading line by line would hold a 500 MB
  one-line log in memory;
* :func:`read_json` reads a small JSON file the payload wrote (``out/optstep.json``) after checking it is a regular
  file of at most :data:`MAX_JSON_BYTES`.

Logs are copied into the results store streamed as well (:meth:`bridgebench.results.store.ResultStore.put_blob_file`).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Iterable

from bridgebench.errors import BridgebenchError

#: bytes read per step when scanning a log
CHUNK_BYTES = 1 << 20
#: a marker line longer than this is not a payload's (its JSON is a few kB): it is skipped
MAX_MARKER_BYTES = 16 << 20
#: the payload's result file is a few kB; anything larger is not read
MAX_JSON_BYTES = 64 << 20


class JobFileError(BridgebenchError):
    """A file the job wrote cannot be read safely (not a regular file, too large, or outside the job folder)."""


def refused(job_dir: str | os.PathLike | None, also: Iterable[str | os.PathLike] = ()) -> list[str]:
    """``path: why`` for each entry of ``job_dir`` (walked without following symlinks) and of ``also`` (files
    collect reads that may lie elsewhere) that is neither a regular file nor a folder, or is a symlink leading out of
    ``job_dir``. Empty when the folder is safe to read (or does not exist)."""
    out: list[str] = []
    if not job_dir or not os.path.isdir(job_dir):
        return out
    root = os.path.realpath(job_dir)
    seen = set()

    def judge(path: str) -> None:
        if path in seen:
            return
        seen.add(path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as err:
            out.append(f"{path}: cannot be read ({os.strerror(err.errno) if err.errno else err})")
            return
        if stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(path)
            if not (target == root or target.startswith(root + os.sep)):
                out.append(f"{path}: a symlink leading out of the job folder (to {target})")
                return
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return  # dangling inside the folder: nothing to read
            except OSError as err:  # ELOOP (a symlink loop), EACCES ...: it cannot be read, say why
                out.append(f"{path}: cannot be read ({os.strerror(err.errno) if err.errno else err})")
                return
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            out.append(f"{path}: {_kind(st.st_mode)}, not a regular file")

    def walk_error(err: OSError) -> None:  # a folder os.walk cannot list (EACCES, ELOOP): named, not skipped
        out.append(f"{err.filename}: cannot be listed ({os.strerror(err.errno) if err.errno else err})")

    for folder, dirs, files in os.walk(root, onerror=walk_error):
        for name in dirs + files:
            judge(os.path.join(folder, name))
    for path in also:
        judge(os.fspath(path))
    return out


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _open_regular(path: str | os.PathLike) -> int:
    """A read fd of ``path`` if it is a regular file (opened without blocking, then checked); JobFileError else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JobFileError(f"{path}: {_kind(os.stat(path).st_mode)}, not a regular file: not read")
    return fd


def last_marker(logs: Iterable[str | os.PathLike], marker: str) -> dict[str, Any] | None:
    """The JSON payload of the last ``<marker><json>`` line in the logs (rank prefixes allowed before it), read in
    chunks of :data:`CHUNK_BYTES`; a line whose JSON does not parse, or longer than :data:`MAX_MARKER_BYTES`, is
    skipped."""
    needle = marker.encode()
    found = None
    for log in logs:
        fd = _open_regular(log)
        try:
            found = _scan(fd, needle) or found
        finally:
            os.close(fd)
    return found


def _scan(fd: int, needle: bytes) -> dict[str, Any] | None:
    found = None
    tail = b""  # the end of the previous chunk that may hold the start of a marker
    while True:
        chunk = os.read(fd, CHUNK_BYTES)
        if not chunk:
            return found
        buf = tail + chunk
        start = 0
        while (i := buf.find(needle, start)) >= 0:
            end = buf.find(b"\n", i)
            while end < 0 and len(buf) - i <= MAX_MARKER_BYTES:  # the line goes on in the next chunks
                more = os.read(fd, CHUNK_BYTES)
                if not more:
                    end = len(buf)
                    break
                buf += more
                end = buf.find(b"\n", i)
            if end < 0:  # longer than any payload's line: skip to its end
                buf = _skip_line(fd)
                start = 0
                continue
            try:
                found = json.loads(buf[i + len(needle) : end])
            except ValueError:
                pass
            start = end
        tail = buf[-(len(needle) - 1) :] if len(needle) > 1 else b""


def _skip_line(fd: int) -> bytes:
    """Read on to the end of the current line; the rest of the chunk after it."""
    while chunk := os.read(fd, CHUNK_BYTES):
        nl = chunk.find(b"\n")
        if nl >= 0:
            return chunk[nl:]
    return b""


def read_json(path: str | os.PathLike) -> Any:
    """The JSON in ``path`` (a regular file of at most :data:`MAX_JSON_BYTES`), or None when it is absent or does
    not parse.

    Raises:
        JobFileError: not a regular file, or too large.
    """
    try:
        fd = _open_regular(path)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size > MAX_JSON_BYTES:
            raise JobFileError(f"{path}: {size} bytes, more than a result file ({MAX_JSON_BYTES} at most): not read")
        data = b"".join(iter(lambda: os.read(fd, CHUNK_BYTES), b""))
    finally:
        os.close(fd)
    try:
        return json.loads(data)
    except ValueError:
        return None


def log_copies(store, logs: Iterable[Path]) -> list[dict[str, Any]]:
    """``{"name", "sha256", "bytes"}`` of each log, copied into ``store`` streamed (None: sizes only)."""
    out = []
    for p in logs:
        if store is not None:
            digest, size = store.put_blob_file(p)
        else:
            digest, size = None, os.stat(p).st_size
        out.append({"name": Path(p).name, "sha256": digest, "bytes": size})
    return out
