"""``bridgebench sweep --submit`` on the real local SLURM cluster: a sweep of the optimizer-step experiment over its job
settings submits its top K through the job ledger, ``status`` and ``collect`` see them, and a second sweep of the same
space skips them by config hash (already submitted and measured)."""

from __future__ import annotations

import json
import time

import pytest

from tests.launch.test_e2e_local import SMALL, bb  # noqa: F401  (fixture: bridgebench against the cluster)
from tests.launch.test_local_cluster import slurm_cluster  # noqa: F401  (session fixture: starts/stops the cluster)

pytestmark = pytest.mark.slurm
SPACE = ["--space", "optstep_local", *SMALL[1:]]  # SMALL[0] is experiment=optstep_local, fixed by the space file


def test_sweep_submits_its_top_k_and_status_collect_see_them(bb, tmp_path):  # noqa: F811
    bb.env["BRIDGEBENCH_SWEEPS"] = str(tmp_path / "sweeps")  # the fixture's env: ledger, store, plans in tmp_path
    res = json.loads(bb("sweep", *SPACE, "--submit", "--name", "s", "--json").stdout)
    top = res["top"]
    assert len(top) == 2 and {t["status"] for t in top} == {"submitted"}
    assert [(t["rank"]) for t in top] == [1, 2]
    run_ids = {t["run_ids"] for t in top}
    assert run_ids == {f"{t['config_hash']}-r0" for t in top}
    deadline = time.monotonic() + 600
    while True:
        attempts = json.loads(bb("status", "--json").stdout)
        assert {a["run_id"] for a in attempts} == run_ids
        if all(a["state"] == "COMPLETED" for a in attempts) or time.monotonic() > deadline:
            break
        assert not {a["state"] for a in attempts} & {"FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY"}, attempts
        time.sleep(3)
    assert {a["state"] for a in attempts} == {"COMPLETED"}, attempts
    assert json.loads(bb("collect", "--json").stdout)["added"] == 2
    # the same space under another name: its top K are already submitted and measured, nothing is submitted again
    again = json.loads(bb("sweep", *SPACE, "--submit", "--name", "s2", "--json").stdout)
    assert {t["status"] for t in again["top"]} == {"skipped"}
    assert len(json.loads(bb("status", "--json").stdout)) == 2
