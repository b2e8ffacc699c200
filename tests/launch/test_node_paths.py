"""Node-side paths by construction (launch/nodepaths.py): a plan rendered with ``--out`` outside the repository puts
no path of the submitting machine into anything the job reads -- ``submit.sh``, the payload script, the job's
``config.yaml`` (``node_config.yaml`` in the plan, ``configs/config.yaml`` in the job folder) and
``megatron_bridge.yaml`` -- for every shipped cluster config.

Submit-side paths: the plan folder (``--out``) and its parent, always; and where the job runs in a container or on
the far side of an SSH tunnel, also this checkout, the local job folders (``paths.job_dir``) and this Python
(``sys.prefix``) -- except where the cluster itself declares a path on its side that happens to lie there (the
emulated remote cluster keeps its stand-in cluster filesystem under ``.state/remote``): its tunnel ``job_dir`` and
the sources of its ``container_mounts`` are the cluster's paths, not the submit side's. With a local tunnel and no
container (``cluster=local``) the node *is* this machine: the checkout and this Python are the job's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bridgebench.config.compose import compose
from bridgebench.paths import CONFIG_DIR, REPO_ROOT, load_paths
from tests.launch.small_optstep import BB

CLUSTERS = sorted(p.stem for p in (CONFIG_DIR / "cluster").glob("*.yaml"))
JOB_FILES = ("submit.sh", "payload.sh", "node_config.yaml", "megatron_bridge.yaml")


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("BRIDGEBENCH_PLANS", str(tmp_path / "plans"))
    monkeypatch.setenv("BRIDGEBENCH_JOB_DIR", str(tmp_path / "submit-side-jobs"))
    return tmp_path


def node_roots(cluster) -> list[str]:
    """Paths the cluster declares on its own side: its tunnel job_dir (SSH) and its container mount sources."""
    roots = [str(m).split(":")[0] for m in cluster.container_mounts]
    if cluster.tunnel.type != "local":
        roots.append(str(cluster.tunnel.job_dir))
    return sorted(roots, key=len, reverse=True)


def submit_side(cluster, out: Path) -> list[str]:
    paths = [str(out), str(out.parent)]
    far = cluster.tunnel.type != "local" or bool(cluster.pyxis and cluster.container)
    if far:
        paths += [str(REPO_ROOT), str(load_paths().job_dir), sys.prefix, str(Path(sys.prefix).resolve())]
    return paths


def assert_no_submit_side_path(run_dir: Path, cluster, out: Path) -> list[str]:
    checked = []
    for name in JOB_FILES:
        f = run_dir / name
        if not f.exists():
            continue
        text = f.read_text()
        for root in node_roots(cluster):  # the cluster's own paths are the job's to use
            text = text.replace(root, "<node>")
        for p in submit_side(cluster, out):
            assert p not in text, f"{name} of cluster {cluster.name} names the submit-side path {p}"
        checked.append(name)
    return checked


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_optstep_job_reads_no_submit_side_path(env, cluster):
    from bridgebench.launch.plan import plan

    out = env / "elsewhere" / "plan"
    final, (run,) = plan(["experiment=optstep_local", f"cluster={cluster}"], out)
    cfg = compose(["experiment=optstep_local", f"cluster={cluster}"]).cluster
    checked = assert_no_submit_side_path(Path(run.dir), cfg, out)
    assert checked == ["submit.sh", "payload.sh", "node_config.yaml"]
    payload = (Path(run.dir) / "payload.sh").read_text()
    node_cfg = OmegaConf.create((Path(run.dir) / "node_config.yaml").read_text())
    assert "paths" not in node_cfg and node_cfg.cluster.client_env == {} and node_cfg.cluster.identity_file is None
    script = (Path(run.dir) / "submit.sh").read_text()
    if run.container_image:  # the job addresses its folder as nemo-run's mount
        assert "--config /nemo_run/configs/config.yaml --out /nemo_run/out" in payload
        assert "export BRIDGEBENCH_OUT_DIR=/nemo_run/out" in script
        assert "cd /opt/bridgebench && PYTHONPATH=/opt/bridgebench/src python -m" in payload
    else:  # on the host, the job folder under the tunnel's job_dir
        assert f"--config {env}/submit-side-jobs/" in payload and "/configs/config.yaml --out " in payload


@pytest.mark.megatron
def test_done_when_kimi_k2_on_nvl72_with_out_elsewhere(tmp_path):
    """The issue's command, verbatim: `plan ... cluster=example_nvl72 --out ../elsewhere` from a folder of its own."""
    cwd = tmp_path / "here"
    cwd.mkdir()
    env = {**os.environ, "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs")}
    args = ["plan", "recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "cluster=example_nvl72", "--out", "../elsewhere"]
    res = subprocess.run([*BB, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "elsewhere"
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    cfg = compose(["cluster=example_nvl72"]).cluster
    assert assert_no_submit_side_path(run_dir, cfg, out) == list(JOB_FILES)
    mb = (run_dir / "megatron_bridge.yaml").read_text()
    assert "tensorboard_dir: /nemo_run/out/tensorboard" in mb
    assert "--config /nemo_run/configs/config.yaml" in (run_dir / "payload.sh").read_text()


@pytest.mark.megatron
@pytest.mark.parametrize("cluster", [c for c in CLUSTERS if c != "example_nvl72"])
def test_pretrain_job_reads_no_submit_side_path(env, cluster):
    from bridgebench.launch.plan import plan

    out = env / "elsewhere" / "plan"
    _, (run,) = plan(["recipe=qwen3_30b_a3b_gb300_mxfp8", f"cluster={cluster}"], out)
    cfg = compose([f"cluster={cluster}"]).cluster
    assert assert_no_submit_side_path(Path(run.dir), cfg, out) == list(JOB_FILES)


def test_a_container_cluster_must_mount_the_repository(env):
    from bridgebench.launch.plan import PlanError, plan

    with pytest.raises(PlanError, match="mounts the cluster's checkout there"):
        plan(["experiment=optstep_local", "cluster=example_nvl72", "cluster.container_mounts=[/a:/b]"], env / "p")


def test_an_ssh_cluster_without_containers_is_refused(env):
    from bridgebench.launch.plan import PlanError, plan

    with pytest.raises(PlanError, match="does not know where a checkout and a Python are"):
        plan(["experiment=optstep_local", "cluster=example_nvl72", "cluster.pyxis=false"], env / "p")
