"""One submission script: the plan's submit.sh is the script `submit` sends (first repeat, first attempt), byte for
byte; later repeats differ only in their ids and the dependency that chains them. A plan for a cluster shows only
the flags that cluster supports (local: no --segment, --container-image or --mpi=pmix)."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launch.test_e2e_local import SMALL, bb  # noqa: F401  (fixture: CLI against the local cluster)
from tests.launch.test_local_cluster import slurm_cluster  # noqa: F401  (session fixture)

BB = [sys.executable, "-m", "bridgebench.cli"]


def test_local_plan_has_only_what_the_local_cluster_supports(tmp_path):
    env = {**os.environ, "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs")}
    res = subprocess.run(
        [*BB, "plan", "experiment=optstep_local", "--out", str(tmp_path / "p"), "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    script = next((tmp_path / "p").glob("*/submit.sh")).read_text()
    for flag in ("--segment", "--container-image", "--container-mounts", "--mpi=pmix", "--gpus-per-node"):
        assert flag not in script, flag  # configs/cluster/local.yaml: no segment support, no pyxis, no real GPUs
    assert "#SBATCH --exclusive" in script  # a measurement has the node to itself
    run = json.loads(res.stdout)["runs"][0]
    assert run["container_image"] is None and run["cluster_can_run"] == []


@pytest.mark.slurm
def test_the_plans_script_is_the_submitted_script(bb):  # noqa: F811
    attempts = json.loads(bb("submit", *SMALL, "job.repeats=100000", "--repeats", "2", "--json").stdout)
    try:
        first, second = attempts
        run_dir = Path(first["plan_dir"])
        planned = (run_dir / "submit.sh").read_text()
        sent = (run_dir / "submitted" / f"{first['run_id']}-a0.sbatch.sh").read_text()
        in_job_dir = next(Path(first["job_dir"]).rglob("*_sbatch.sh")).read_text()
        diff = "".join(difflib.unified_diff(planned.splitlines(True), sent.splitlines(True), "plan", "submitted"))
        assert planned == sent == in_job_dir, diff
        import hashlib

        assert first["script_sha256"] == hashlib.sha256(sent.encode()).hexdigest()
        # repeat 1: same script but its own run id / job folder and the dependency on repeat 0
        later = (run_dir / "submitted" / f"{second['run_id']}-a0.sbatch.sh").read_text()
        dependency = f"#SBATCH --dependency=afterany:{first['slurm_job_id']}\n"
        assert dependency in later
        r0, r1 = first["run_id"], second["run_id"]
        assert later.replace(dependency, "").replace(r1, r0).replace("-r1-a0", "-r0-a0") == planned
        assert second["depends_on"] == first["slurm_job_id"]
    finally:
        bb("cancel")
