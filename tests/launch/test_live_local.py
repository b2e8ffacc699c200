"""Live view on the real local SLURM cluster: ``bridgebench status`` shows the running optimizer-step job's latest
step time and iteration / total from its log (the payload prints Megatron-LM iteration lines), and ``bridgebench
logs follow`` ends when the job does."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from tests.launch.test_e2e_local import SMALL, bb  # noqa: F401  (fixture: bridgebench with a private ledger/store)
from tests.launch.test_local_cluster import slurm_cluster  # noqa: F401  (session fixture: starts/stops the cluster)

pytestmark = pytest.mark.slurm


def test_status_shows_live_figures_and_follow_ends_with_the_job(bb, slurm_cluster):  # noqa: F811
    # long enough (3 families x 1,000 timed steps, tens of seconds) that a status poll sees it running, loaded or not
    attempts = json.loads(bb("submit", *SMALL, "job.repeats=1000", "--json").stdout)
    run_id, job = attempts[0]["run_id"], attempts[0]["slurm_job_id"]
    slurm_cluster.wait_running(job, timeout=120)
    live = None
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        out = bb("status").stdout
        live = re.search(rf"{run_id}/a0 \S+ RUNNING: iteration (\d+)/(\d+) step ([0-9.e-]+) s", out)
        if live:
            break
        time.sleep(1)
    assert live, out
    done, total = int(live.group(1)), int(live.group(2))
    assert 1 <= done <= total and float(live.group(3)) > 0 and "ETA" in out
    res = subprocess.run(
        [*bb.cmd, "logs", "follow", run_id, "--interval", "1", "--timeout", "600"],
        capture_output=True,
        text=True,
        env=bb.env,
        timeout=700,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    last = res.stdout.strip().splitlines()[-1]
    assert f"{run_id}/a0" in last and "COMPLETED" in last and f"iteration {total}/{total}" in last
