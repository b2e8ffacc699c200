"""End to end on the real local SLURM cluster: two experiments of the optimizer-step payload (AdamW vs Muon on a
scaled-down Qwen3 MoE), 5 repeats each, collected into the results store, then ``bridgebench compare --source runs``
gives a ratio with a bootstrap confidence interval and a verdict.

Each job's per-repeat step times travel payload -> ``optstep.json`` (``total.*_times_s``) -> ``collect`` ->
``record["series"]``; the comparison resamples those series, one run per SLURM job.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from bridgebench.results.store import ResultStore
from tests.launch.small_optstep import BB
from tests.launch.small_optstep import SMALL as SMALL_EXPERIMENT
from tests.launch.test_local_cluster import slurm_cluster  # noqa: F401  (session fixture: starts/stops the cluster)

pytestmark = pytest.mark.slurm
SMALL = [*SMALL_EXPERIMENT, "job.repeats=5"]


def test_adamw_vs_muon_five_repeats_each(tmp_path, slurm_cluster, capsys):  # noqa: F811
    env = {
        **slurm_cluster.env,
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
        "BRIDGEBENCH_TABLES": str(tmp_path / "tables"),
    }

    def bb(*args, timeout=1200):
        res = subprocess.run([*BB, *args], capture_output=True, text=True, env=env, timeout=timeout)
        assert res.returncode == 0, f"bridgebench {' '.join(args)} failed ({res.returncode}):\n{res.stderr[-3000:]}"
        return res.stdout

    attempts = []
    for optimizer in ("adamw", "muon"):  # each submission waits for its own 5 jobs
        attempts += json.loads(
            bb("submit", *SMALL, f"optimizer={optimizer}", "--repeats", "5", "--wait", "--timeout", "1200", "--json")
        )
    assert len(attempts) == 10 and {a["state"] for a in attempts} == {"COMPLETED"}, attempts
    assert json.loads(bb("collect", "--json"))["added"] == 10

    records = ResultStore(os.path.join(env["BRIDGEBENCH_RESULTS"])).records(kind="optstep")
    assert len(records) == 10
    for r in records:  # the per-repeat times reached the record as its series
        assert len(r["series"]["step_time_s"]) == 5 and r["series"]["iteration"] == [1, 2, 3, 4, 5]
        total = r["optstep"]["total"]
        key = "muon_step_times_s" if "muon" in r["optimizer"] else "adamw_step_times_s"
        assert r["series"]["step_time_s"] == total[key]

    data = json.loads(bb("compare", "--source", "runs", "--a", "optimizer=adamw", "--b", "optimizer=muon", "--json"))
    total = next(r for r in data["runs"] if r["comparison"] == "B vs A (total)")
    assert total["runs_a"] == total["runs_b"] == 5
    assert total["verdict"] == "slower" and 1 < total["ci_low"] < total["ratio"] < total["ci_high"]
    ids = {r["record_id"] for r in records}
    prov = data["provenance"]
    assert set(prov["sides"]["A"]["records"]) | set(prov["sides"]["B"]["records"]) == ids
    assert prov["parameters"]["seed"] == 0 and prov["versions"]["arch"] != "not installed"
    assert any(f.endswith("runs.png") for f in data["files"])
    # same command, same store: same numbers
    again = json.loads(bb("compare", "--source", "runs", "--a", "optimizer=adamw", "--b", "optimizer=muon", "--json"))
    assert again["runs"] == data["runs"]
    with capsys.disabled():
        print("\n[compare e2e] Muon vs AdamW optimizer step, 5 vs 5 SLURM jobs x 5 repeats:")
        for r in data["runs"]:
            print(
                f"  {r['comparison']}: ratio {r['ratio']:.3f}, 95% CI [{r['ci_low']:.3f}, {r['ci_high']:.3f}], "
                f"Mann-Whitney p {r['mannwhitney_runs_p']:.3g}, q {r['q_value']}, {r['verdict']}"
            )
