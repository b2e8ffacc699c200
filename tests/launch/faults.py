"""Test-only fault injection, run as a job wrapper: ``job.wrapper=[<python>, tests/launch/faults.py, MODE]``.

The launcher runs ``<wrapper argv> <payload command>``; this script fails the way a real job does, or runs the payload:

- ``exit``: raise an uncaught RuntimeError (a Python traceback in the job log, i.e. a ``crash``);
- ``nccl_once``: on the first attempt (``BRIDGEBENCH_ATTEMPT`` = 0) print PyTorch's NCCL watchdog timeout message
  (format of ``ProcessGroupNCCL::WorkNCCL::checkTimeout``, torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp) and exit
  1, as a rank whose collective hung does; later attempts run the payload normally;
- ``env_sha256 NAME DIGEST``: exit 3 unless the job's environment variable NAME has that sha256 (hex), else run the
  payload -- proves a value reached the job intact without writing the value anywhere;
- ``env_print NAME``: print ``faults.py: NAME=<value>`` (the value the job's shell gave it), then run the payload;
- ``oom``: run the payload as a child and, once it has printed its start line (``BRIDGEBENCH_START``), make the job
  step's memory grow until the kernel's OOM killer acts, as a payload that outgrows the job's ``--mem`` does. The
  payload is made the OOM killer's first choice (``oom_score_adj`` 1000), so it is the process killed; this script
  then exits as it did (SIGKILL). Only meaningful where the cluster confines memory (task/cgroup); elsewhere it gives
  up after ``OOM_CAP`` bytes with exit 4.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys

NCCL_WATCHDOG = (
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out."
)

#: The most ``oom`` allocates before it gives up (bytes): far above the tests' ``--mem``, far below the machine.
OOM_CAP = 4 << 30


def _oom_killer_prefers_me() -> None:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


def run_until_oom(command: list[str]) -> None:
    """The ``oom`` mode (module docstring); exits with the payload's status, 128 + signal when it was killed."""
    from bridgebench.payloads.markers import START

    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, preexec_fn=_oom_killer_prefers_me)
    held: list[bytearray] = []
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if START in line:
            break
    while child.poll() is None and sum(map(len, held)) < OOM_CAP:
        block = bytearray(32 << 20)
        block[::4096] = b"\1" * len(block[::4096])  # touch every page: resident, charged to the step's cgroup
        held.append(block)
    if child.poll() is None:
        child.kill()
        print(f"faults.py: allocated {OOM_CAP >> 20} MiB without an OOM kill: memory is not confined", file=sys.stderr)
        raise SystemExit(4)
    held.clear()
    rest = child.stdout.read()
    sys.stdout.write(rest)
    code = child.wait()
    print(
        f"faults.py: the payload ended {'by signal ' + signal.Signals(-code).name if code < 0 else code}",
        file=sys.stderr,
    )
    raise SystemExit(128 - code if code < 0 else code)


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
    if mode == "env_print":
        name, command = command[0], command[1:]
        print(f"faults.py: {name}={os.environ.get(name)}", file=sys.stderr, flush=True)
        os.execvp(command[0], command)
    if mode == "oom":
        run_until_oom(command)
    if mode == "exit":
        raise RuntimeError("injected failure (tests/launch/faults.py exit)")
    if mode == "nccl_once" and os.environ.get("BRIDGEBENCH_ATTEMPT", "0") == "0":
        print(NCCL_WATCHDOG, file=sys.stderr, flush=True)
        raise SystemExit(1)
    if mode not in ("exit", "nccl_once"):
        raise SystemExit(f"faults.py: unknown mode {mode!r} (exit | nccl_once | env_sha256 | env_print | oom)")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
