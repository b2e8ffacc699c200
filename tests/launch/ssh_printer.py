"""Run an rsync command line for real with an argv printer in place of ``ssh`` on PATH, to read the words rsync gave
``ssh`` (tests of the tunnel's copy: launch/tunnel.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

SSH_PRINTER = """#!/bin/sh
printf '%s\\0' "$@" > "$ARGV_FILE"
exit 255
"""


def rsync_ssh_words(tmp: Path, argv: list[str]) -> list[str]:
    """Run the rsync ``argv`` (in ``tmp``) with the printer as ``ssh``; the words rsync gave ``ssh``, ``$0`` not
    included. Fails when rsync never ran ssh."""
    bin_dir = tmp / "sshbin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ssh").write_text(SSH_PRINTER)
    (bin_dir / "ssh").chmod(0o755)
    out = tmp / "ssh.argv"
    out.unlink(missing_ok=True)  # a property test calls this many times in one folder
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ARGV_FILE": str(out)}
    subprocess.run(argv, env=env, cwd=tmp, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.exists(), "rsync did not run ssh"
    return [w.decode("utf-8", "surrogateescape") for w in out.read_bytes().split(b"\0")[:-1]]
