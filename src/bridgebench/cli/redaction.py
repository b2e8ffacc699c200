"""The one redaction step at the CLI's error boundary: no credential-shaped text leaves ``bridgebench`` on stdout or
stderr, whoever wrote it (bridgebench's messages, Hydra's and OmegaConf's errors that echo an override, click's usage
errors, Python warnings, a traceback).

:func:`redacted_output` (used by :func:`bridgebench.cli.main`) swaps ``sys.stdout`` / ``sys.stderr`` for line-buffered
writers that pass every line through :func:`scrub`: :func:`bridgebench.config.secrets.redact` (token-shaped values,
URL passwords, ``NAME=value`` with a credential-like name) plus the values known to be secret for this command --
those of command-line overrides whose key looks like a credential's or whose value looks like a token
(``+env_vars.HF_TOKEN=...``, ``model.seq_length=ghp_...``), and those of environment variables with a credential-like
name (``HF_TOKEN``, ``WANDB_API_KEY``) -- wherever they appear. Code that writes elsewhere (a debug log) calls
:func:`scrub` on its text.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import Iterable, Iterator, Mapping

from bridgebench.config.secrets import ordinary_field, redact, secret_name, token_kind

#: values of environment variables shorter than this are not scrubbed by value (too likely to be ordinary text)
MIN_ENV_SECRET = 6
_known: set[str] = set()


def known_secrets(argv: Iterable[str], environ: Mapping[str, str] | None = None) -> set[str]:
    """Strings to scrub for a command: override values with a credential-like key or a token-shaped value (also
    unquoted), URL passwords, and the values of credential-named environment variables."""
    out: set[str] = set()
    for arg in argv:
        key, eq, value = str(arg).partition("=")
        if not eq:
            continue
        last = key.lstrip("+~").rsplit(".", 1)[-1]
        if (secret_name(last) and not ordinary_field(key)) or token_kind(value):
            out |= {value, value.strip("'\"")}
    env = os.environ if environ is None else environ
    out |= {v for k, v in env.items() if secret_name(k) and len(v) >= MIN_ENV_SECRET}
    return {v for v in out if v}


def scrub(text: str) -> str:
    """``text`` without credential-shaped substrings nor the current command's known secrets (:func:`known_secrets`)."""
    return redact(text, _known)


class _Redacting(io.TextIOBase):
    """A text stream that writes whole lines through :func:`scrub` to ``target`` (a partial line waits for its end,
    or for ``flush``)."""

    def __init__(self, target) -> None:
        self._target = target
        self._pending = ""

    def write(self, text: str) -> int:
        data = self._pending + text
        head, nl, self._pending = data.rpartition("\n")
        if nl:
            self._target.write(scrub(head + nl))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._target.write(scrub(self._pending))
            self._pending = ""
        self._target.flush()

    def isatty(self) -> bool:
        return self._target.isatty()

    def fileno(self) -> int:
        return self._target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._target, "errors", None)

    def writable(self) -> bool:
        return True


@contextlib.contextmanager
def redacted_output(argv: Iterable[str]) -> Iterator[None]:
    """Within: ``sys.stdout`` and ``sys.stderr`` scrub every line (module docstring); the secrets are those of
    ``argv`` and the environment."""
    global _known
    saved = sys.stdout, sys.stderr, _known
    _known = known_secrets(argv)
    sys.stdout, sys.stderr = _Redacting(saved[0]), _Redacting(saved[1])
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr, _known = saved
