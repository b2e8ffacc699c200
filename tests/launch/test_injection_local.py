"""Shell injection and secrets on the real local SLURM cluster (issue 17):

* ``cluster.pyxis=true`` with an injected ``release.container_image`` (the issue's reproduction ran ``touch`` on the
  node and the job ended COMPLETED): ``submit`` refuses before sbatch, naming the rule; no job reaches SLURM, no file
  appears;
* the second guard: with the grammar check switched off, the check of the rendered script still stops it before
  sbatch;
* a variable passed by name (``+env_vars.DBCONN=${oc.env:MYDBPASS}``) reaches the job intact (checked inside the job
  by sha256) and its value is in no file bridgebench wrote (plans, ledger, job folders with their ``set -x`` logs,
  results store) and in no output line.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launch.test_e2e_local import SMALL, bb  # noqa: F401  (fixture: CLI against the local cluster)
from tests.launch.test_local_cluster import slurm_cluster  # noqa: F401  (session fixture)

pytestmark = pytest.mark.slurm
FAULTS = Path(__file__).with_name("faults.py")


def written_files(env: dict) -> list[Path]:
    roots = [Path(env[k]) for k in ("BRIDGEBENCH_LEDGER", "BRIDGEBENCH_RESULTS", "BRIDGEBENCH_JOB_DIR")]
    roots.append(Path(env["BRIDGEBENCH_PLANS"]))
    return [p for r in roots if r.exists() for p in ([r] if r.is_file() else r.rglob("*")) if p.is_file()]


def test_injected_container_image_with_pyxis_is_refused_before_sbatch(bb, slurm_cluster, tmp_path):  # noqa: F811
    marker = tmp_path / "PWNED"
    before = slurm_cluster.run("squeue", "-h", "-o", "%i").stdout.split()
    res = bb(
        "submit",
        *SMALL,
        "cluster.pyxis=true",
        f"release.container_image='nvcr.io/x;touch {marker};#'",
        "--wait",
        "--timeout",
        "60",
        check=False,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "shell_safe_value" in res.stderr and "release.container_image" in res.stderr
    assert slurm_cluster.run("squeue", "-h", "-o", "%i").stdout.split() == before
    assert json.loads(bb("status", "--json").stdout) == []
    assert not marker.exists()


def test_the_rendered_script_check_stops_an_injection_the_grammar_missed(slurm_cluster, tmp_path, monkeypatch):  # noqa: F811
    """Switch the grammar checks off (as a future field nobody listed would be): the script nemo-run renders is
    still compared with what bridgebench meant inside nemo-run's materialize, before sbatch runs."""
    from bridgebench.config.compose import compose
    from bridgebench.launch import executor, shellsafe, submit
    from bridgebench.launch.ledger import Ledger

    for k, v in slurm_cluster.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("BRIDGEBENCH_JOB_DIR", str(tmp_path / "jobs"))
    marker = tmp_path / "PWNED"
    monkeypatch.setattr(shellsafe, "check_config", lambda cfg: None)
    real = shellsafe.check
    monkeypatch.setattr(shellsafe, "check", lambda kind, v, *a: v if kind == "image" else real(kind, v, *a))
    # a container cluster mounts its checkout where the job runs bridgebench (launch/nodepaths.py)
    cfg = compose([*SMALL, "cluster.pyxis=true", "cluster.container_mounts=['/srv/bridgebench:/opt/bridgebench']"])
    cfg.release.container_image = f"nvcr.io/x;touch {marker};#"
    run_dir = tmp_path / "plan" / "run"
    run_dir.mkdir(parents=True)
    before = slurm_cluster.run("squeue", "-h", "-o", "%i").stdout.split()
    ledger = Ledger(tmp_path / "ledger.sqlite")
    with pytest.raises(executor.LaunchConfigError) as err:
        submit.submit_run(cfg, run_dir, "injected", "abcdef123456-r0", ledger)
    assert "shell_safe_value" in str(err.value) and "nvcr.io/x;touch" in str(err.value)
    assert slurm_cluster.run("squeue", "-h", "-o", "%i").stdout.split() == before
    assert ledger.attempts() == [] and not marker.exists()


def test_a_variable_passed_by_name_reaches_the_job_and_no_file(bb, tmp_path):  # noqa: F811
    secret = "db pass; $(touch x) `y` 'q' \"dq\" s3cr3t-Value-9f2c"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    wrapper = [sys.executable, str(FAULTS), "env_sha256", "DBCONN", digest]
    res = subprocess.run(
        [
            *bb.cmd,
            "submit",
            *SMALL,
            "+env_vars.DBCONN=${oc.env:MYDBPASS}",
            f"job.wrapper={json.dumps(wrapper)}",
            "--wait",
            "--timeout",
            "300",
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**bb.env, "MYDBPASS": secret},
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (a,) = json.loads(res.stdout)
    assert a["state"] == "COMPLETED", a
    logs = "".join(p.read_text(errors="replace") for p in Path(a["job_dir"]).rglob("*.out"))
    assert "DBCONN arrived intact" in logs
    assert json.loads(bb("collect", "--json").stdout)["added"] == 1
    files = written_files(bb.env)
    assert len(files) > 10
    assert not [p for p in files if secret.encode() in p.read_bytes()]
    config = next(Path(bb.env["BRIDGEBENCH_PLANS"]).rglob("config.yaml")).read_text()
    assert "DBCONN: ${oc.env:MYDBPASS}" in config  # the plan says where the value comes from, not what it is
    assert secret not in res.stdout + res.stderr
