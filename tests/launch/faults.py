"""Test-only fault injection, run as a job wrapper: ``job.wrapper=[<python>, tests/launch/faults.py, MODE]``.

The launcher runs ``<wrapper argv> <payload command>``; this script fails the way a real job does, or runs the payload:

- ``exit``: raise an uncaught RuntimeError (a Python traceback in the job log, i.e. a ``crash``);
- ``nccl_once``: on the first attempt (``BRIDGEBENCH_ATTEMPT`` = 0) print PyTorch's NCCL watchdog timeout message
  (format of ``ProcessGroupNCCL::WorkNCCL::checkTimeout``, torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp) and exit
  1, as a rank whose collective hung does; later attempts run the payload normally;
- ``env_sha256 NAME DIGEST``: exit 3 unless the job's environment variable NAME has that sha256 (hex), else run the
  payload -- proves a value reached the job intact without writing the value anywhere.
"""

from __future__ import annotations

import hashlib
import os
import sys

NCCL_WATCHDOG = (
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out."
)


def main(argv: list[str]) -> None:
    mode, command = argv[0], argv[1:]
    if mode == "env_sha256":
        name, digest, command = command[0], command[1], command[2:]
        got = hashlib.sha256(os.environ.get(name, "").encode()).hexdigest() if name in os.environ else None
        if got != digest:
            print(f"faults.py: {name} is {'missing' if got is None else 'different'} in the job", file=sys.stderr)
            raise SystemExit(3)
        print(f"faults.py: {name} arrived intact (sha256 {digest[:12]}...)", file=sys.stderr)
        os.execvp(command[0], command)
    if mode == "exit":
        raise RuntimeError("injected failure (tests/launch/faults.py exit)")
    if mode == "nccl_once" and os.environ.get("BRIDGEBENCH_ATTEMPT", "0") == "0":
        print(NCCL_WATCHDOG, file=sys.stderr, flush=True)
        raise SystemExit(1)
    if mode not in ("exit", "nccl_once"):
        raise SystemExit(f"faults.py: unknown mode {mode!r} (exit | nccl_once | env_sha256)")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
