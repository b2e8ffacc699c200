"""Ctrl-C in tests: a child that can be interrupted wherever the tests were started."""

from __future__ import annotations

import signal


def interruptible() -> None:
    """``preexec_fn`` of a command a test will SIGINT: SIGINT back to its default before exec.

    A shell without job control starts background commands (``make test &``, ``nohup``) with SIGINT ignored; the
    child inherits that, Python then installs no KeyboardInterrupt handler, and the test's SIGINT is lost: the
    command runs to its end and exits 0 (seen in a fresh-clone suite started in the background, stop 31).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
