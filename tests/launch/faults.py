"""Test-only fault injection, run as a job wrapper: ``job.wrapper=[<python>, tests/launch/faults.py, MODE]``.

The launcher runs ``<wrapper argv> <payload command>``; this script fails the way a real job does, or runs the payload:

- ``exit``: raise an uncaught RuntimeError (a Python traceback in the job log, i.e. a ``crash``);
- ``nccl_once``: on the first attempt (``BRIDGEBENCH_ATTEMPT`` = 0) print PyTorch's NCCL watchdog timeout message
  (format of ``ProcessGroupNCCL::WorkNCCL::checkTimeout``, torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp) and exit
  1, as a rank whose collective hung does; later attempts run the payload normally.
"""

from __future__ import annotations

import os
import sys

NCCL_WATCHDOG = (
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out."
)


def main(argv: list[str]) -> None:
    mode, command = argv[0], argv[1:]
    if mode == "exit":
        raise RuntimeError("injected failure (tests/launch/faults.py exit)")
    if mode == "nccl_once" and os.environ.get("BRIDGEBENCH_ATTEMPT", "0") == "0":
        print(NCCL_WATCHDOG, file=sys.stderr, flush=True)
        raise SystemExit(1)
    if mode not in ("exit", "nccl_once"):
        raise SystemExit(f"faults.py: unknown mode {mode!r} (exit | nccl_once)")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
