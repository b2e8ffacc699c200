"""The lines a payload prints so that ``collect`` can tell what happened on the node from the job's log alone.

* ``BRIDGEBENCH_START {json}`` -- the first thing a payload does, before any heavy import: the payload started (its
  Python ran, its arguments parsed). A job whose log lacks it never started its payload: the command was not found,
  a path did not resolve on the node, a wrapper failed or exited 0 without running it. ``collect`` records that as
  outcome ``never_started`` (``launch/outcome.py``), whatever the scheduler's state.
* ``BRIDGEBENCH_OPTSTEP {json}`` -- the optimizer-step payload's result (``payloads/optstep.py``, also written to
  ``<out>/optstep.json``).
* ``BRIDGEBENCH_RUN {json}`` -- the pretrain entrypoint's versions and device, after the ConfigContainer is built
  (``payloads/pretrain.py``).

Each is one line on stdout, ``<marker><compact json>``; rank prefixes in front of it are allowed.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

START = "BRIDGEBENCH_START "
OPTSTEP = "BRIDGEBENCH_OPTSTEP "
RUN = "BRIDGEBENCH_RUN "


def announce_start(payload: str) -> None:
    """Print the ``BRIDGEBENCH_START`` line (payload name, host, pid, UTC epoch seconds, SLURM job id, run id)."""
    info = {
        "payload": payload,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": round(time.time(), 3),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID") or None,
        "run_id": os.environ.get("BRIDGEBENCH_RUN_ID") or None,
    }
    sys.stdout.write(START + json.dumps(info, separators=(",", ":")) + "\n")
    sys.stdout.flush()
