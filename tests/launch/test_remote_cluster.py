"""The remote path end to end on one machine, with real parts (launch/remote/, configs/cluster/local_remote.yaml):
plan -> submit over SSH (nemo-run's SSHTunnel to a private sshd on 127.0.0.1, key authentication; nemo-run's rsync
copies the job folder to the tunnel's job_dir) -> the job runs in the emulated container (the login node's srun is
a pyxis stand-in: bubblewrap, a private mount namespace with only the image, the container_mounts and nemo-run's job
folder) -> status (squeue / sacct on the login node) -> logs and out/ fetched back through the tunnel (SFTP) ->
collect -> report. And the emulation can fail: a submit-side path planted into what the job reads (the old
``config_on_node`` behaviour: the plan folder's config.yaml) makes the job fail inside the container.

The session fixture starts launch/remote/up.sh after the local SLURM cluster (tests/launch/test_local_cluster.py)
and stops it afterwards unless it was running before. Skipped where sshd, bubblewrap or root are missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.launch.small_optstep import BB, SMALL
from tests.launch.test_local_cluster import REPO, slurm_cluster  # noqa: F401  (session fixture)

pytestmark = pytest.mark.slurm
REMOTE_DIR = REPO / "launch" / "remote"
REMOTE = [*SMALL, "cluster=local_remote", "job.repeats=2"]


def _env_from(script: Path, env: dict[str, str]) -> dict[str, str]:
    import shlex

    out = subprocess.run([str(script)], env=env, capture_output=True, text=True, check=True).stdout
    result = dict(env)
    for line in out.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            result[key] = shlex.split(value)[0] if value else ""
    return result


@pytest.fixture(scope="session")
def remote_cluster(slurm_cluster):  # noqa: F811
    missing = [c for c in ("bwrap", "rsync", "ssh", "ssh-keygen") if shutil.which(c) is None]
    if not (shutil.which("sshd") or Path("/usr/sbin/sshd").exists()):
        missing.append("sshd")
    if missing:
        pytest.skip(f"emulated remote cluster needs {', '.join(missing)}: run `make cluster-install` as root")
    if os.geteuid() != 0:
        pytest.skip("the emulated login node (sshd, mount namespaces) needs root")
    env = _env_from(REMOTE_DIR / "env.sh", slurm_cluster.env)
    pid_file = Path(env["BRIDGEBENCH_REMOTE_ROOT"]) / "run" / "sshd.pid"
    was_running = pid_file.exists()
    up = subprocess.run([str(REMOTE_DIR / "up.sh")], env=env, capture_output=True, text=True, timeout=300)
    if up.returncode:
        pytest.fail(f"launch/remote/up.sh failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    try:
        yield env
    finally:
        if not was_running and os.environ.get("BRIDGEBENCH_SLURM_KEEP") != "1":
            subprocess.run([str(REMOTE_DIR / "down.sh")], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture()
def rbb(tmp_path, remote_cluster):
    env = {
        **remote_cluster,
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
    }
    env.pop("SLURM_CONF", None)  # the submit side asks SLURM only through the tunnel

    def run(*args, check=True, timeout=600, cmd=BB):
        res = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=timeout)
        if check and res.returncode:
            raise AssertionError(f"bridgebench {' '.join(args)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
        return res

    run.env = env
    return run


def test_plan_submit_over_ssh_container_status_fetch_collect_report(rbb, tmp_path):
    from bridgebench.results.store import ResultStore

    plan = json.loads(rbb("plan", *REMOTE, "--out", str(tmp_path / "elsewhere" / "plan"), "--json").stdout)
    payload = Path(plan["runs"][0]["dir"], "payload.sh").read_text()
    assert "--config /nemo_run/configs/config.yaml --out /nemo_run/out" in payload and str(REPO) not in payload
    res = rbb("submit", *REMOTE, "--wait", "--timeout", "400", "--json")
    (a,) = json.loads(res.stdout)
    assert a["state"] == "COMPLETED" and a["exit_code"] == "0:0", a
    assert "submit: 1 run: 1 COMPLETED" in res.stderr
    root = Path(rbb.env["BRIDGEBENCH_REMOTE_ROOT"])
    node_folder = Path(a["node_job_dir"])
    assert node_folder.is_relative_to(root / "jobs")  # the job ran from the tunnel's job_dir ("cluster" side)
    assert (node_folder / "out" / "optstep.json").exists() and (node_folder / "configs" / "config.yaml").exists()
    # the job step ran in the container: the pyxis stand-in's image, the repository at /opt/bridgebench
    (srun_log,) = node_folder.glob("log-*.out")
    text = srun_log.read_text()
    assert "BRIDGEBENCH_START" in text and '"device":"cpu"' in text
    # status over the tunnel; the logs and out/ were fetched back into the submit side's job folder
    (row,) = json.loads(rbb("status", "--json").stdout)
    assert row["state"] == "COMPLETED" and row["job_dir"].startswith(rbb.env["BRIDGEBENCH_JOB_DIR"])
    local = [p for p in Path(row["job_dir"]).rglob("*.out")]
    assert {p.name for p in local} >= {srun_log.name}
    assert (
        next(Path(row["job_dir"]).rglob("out/optstep.json")).read_bytes()
        == (node_folder / "out" / "optstep.json").read_bytes()
    )
    assert json.loads(rbb("collect", "--json").stdout)["added"] == 1
    (rec,) = ResultStore(Path(rbb.env["BRIDGEBENCH_RESULTS"])).records(kind="optstep")
    assert rec["outcome"] == "completed" and rec["provenance"]["container_image"].startswith("nvcr.io/nvidia/nemo:")
    assert rec["optstep"]["device_type"] == "cpu" and rec["provenance"]["cluster_id"].startswith("local_remote-")
    rows = json.loads(rbb("report", "--json").stdout)
    assert next(r for r in rows if r["family"] == "total")["muon_step_s"] > 0


PLANT = textwrap.dedent(
    """
    # the bug this issue fixed, planted back: the job reads its config from the plan folder on the submit side
    import sys
    from bridgebench.launch import nodepaths

    plan_config = {}
    real = nodepaths.job_paths

    def planted(cfg, run_id, attempt, job_name, *, container):
        paths = real(cfg, run_id, attempt, job_name, container=container)
        return type("Planted", (type(paths),), {"config": property(lambda self: plan_config["path"])})(
            **{f: getattr(paths, f) for f in paths.__dataclass_fields__}
        )

    nodepaths.job_paths = planted
    from bridgebench.launch import plan as plan_mod

    real_plan = plan_mod.plan

    def plan_and_point(overrides, out_dir=None, **kw):
        from bridgebench.launch.jobspec import run_id_for

        final = out_dir or plan_mod.load_paths().plans / "planted"
        from bridgebench.config.compose import compose
        from bridgebench.config.hashing import config_hash

        cfg = compose(list(overrides))
        plan_config["path"] = str(final.absolute() / plan_mod._run_name(cfg, config_hash(cfg)) / "config.yaml")
        return real_plan(overrides, final, **kw)

    plan_mod.plan = plan_and_point
    from bridgebench.cli import main

    sys.exit(main(sys.argv[1:]))
    """
)


def test_a_planted_submit_side_path_fails_the_job_inside_the_container(rbb, tmp_path):
    plant = tmp_path / "plant.py"
    plant.write_text(PLANT)
    res = rbb("submit", *REMOTE, "--wait", "--timeout", "400", "--json", check=False, cmd=[sys.executable, str(plant)])
    assert res.returncode == 3 and "1 FAILED" in res.stderr, res.stderr[-3000:]
    (a,) = json.loads(res.stdout)
    plan_config = Path(a["plan_dir"]) / "config.yaml"
    assert plan_config.exists()  # the path is real -- on the submit side
    sent = Path(a["plan_dir"], "submitted", f"{a['run_id']}-a0.sbatch.sh")
    assert sent.exists()
    payload = next(Path(a["node_job_dir"]).rglob("scripts/*.sh")).read_text()
    assert f"--config {plan_config}" in payload  # the plant reached the job
    assert "does not exist" in a["reason"] and str(plan_config) in a["reason"], a["reason"]
    rbb("collect")
    from bridgebench.results.store import ResultStore

    (rec,) = ResultStore(Path(rbb.env["BRIDGEBENCH_RESULTS"])).records(kind="optstep")
    assert rec["outcome"] == "never_started" and rec["state"] == "FAILED" and str(plan_config) in rec["outcome_detail"]
