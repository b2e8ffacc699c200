"""Every command finds the local SLURM cluster from ``BRIDGEBENCH_SLURM_STATE`` alone (issue 24: ``submit`` ignored it
unless ``SLURM_CONF`` was exported too, and then failed after 100-115 s of sbatch retries while ``status`` said why in
3 s). No cluster needed: the config side, and ``submit`` refusing an absent cluster with the cause before sbatch."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bridgebench.config.compose import compose
from bridgebench.paths import REPO_ROOT
from tests.launch.small_optstep import BB, SMALL


def _local(monkeypatch, **env: str | None) -> tuple[str, str]:
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    cfg = compose(["cluster=local"])
    client = OmegaConf.to_container(cfg.cluster.client_env, resolve=True)
    return client["SLURM_CONF"], str(cfg.cluster.identity_file)


def test_the_state_alone_names_slurm_conf_and_the_cluster_identity(monkeypatch, tmp_path):
    state = tmp_path / "private" / "slurm"
    conf, ident = _local(monkeypatch, BRIDGEBENCH_SLURM_STATE=str(state), SLURM_CONF=None)
    assert (conf, ident) == (str(state / "etc" / "slurm.conf"), str(state / "cluster-id"))
    # the state wins over a stale SLURM_CONF (say, of another checkout's cluster): conf and identity stay one cluster's
    conf, ident = _local(monkeypatch, BRIDGEBENCH_SLURM_STATE=str(state), SLURM_CONF=str(tmp_path / "other.conf"))
    assert (conf, ident) == (str(state / "etc" / "slurm.conf"), str(state / "cluster-id"))
    # a relative state is taken from the current folder, as launch/cluster/common.sh takes it
    monkeypatch.chdir(tmp_path)
    conf, _ = _local(monkeypatch, BRIDGEBENCH_SLURM_STATE="rel/state", SLURM_CONF=None)
    assert conf == str(tmp_path / "rel" / "state" / "etc" / "slurm.conf")
    # without the state: an exported SLURM_CONF, else the default state's
    conf, ident = _local(monkeypatch, BRIDGEBENCH_SLURM_STATE=None, SLURM_CONF="/site/slurm.conf")
    assert conf == "/site/slurm.conf" and ident == str(REPO_ROOT / ".state" / "slurm" / "cluster-id")
    conf, _ = _local(monkeypatch, BRIDGEBENCH_SLURM_STATE=None, SLURM_CONF=None)
    assert conf == str(REPO_ROOT / ".state" / "slurm" / "etc" / "slurm.conf")


def test_the_remote_cluster_reads_the_same_identity(monkeypatch, tmp_path):
    monkeypatch.setenv("BRIDGEBENCH_SLURM_STATE", str(tmp_path / "s"))
    cfg = compose(["cluster=local_remote"])
    assert str(cfg.cluster.identity_file) == str(tmp_path / "s" / "cluster-id")


def test_submit_to_an_absent_state_says_why_before_sbatch(tmp_path):
    """The walkthrough's ``BRIDGEBENCH_SLURM_STATE=<a state never started> bridgebench submit ...``: refused (exit 2)
    with the missing slurm.conf named and how to start the cluster, nothing in the ledger -- not sbatch's retries."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    state = tmp_path / "never-started"
    env |= {
        "BRIDGEBENCH_SLURM_STATE": str(state),
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
        "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs"),
    }
    res = subprocess.run([*BB, "submit", *SMALL], capture_output=True, text=True, env=env, timeout=300)
    err = " ".join(res.stderr.split())
    assert res.returncode == 2, res.stderr[-2000:]
    assert f"{state}/etc/slurm.conf does not exist" in err and "make cluster-up" in err, err
    assert "nothing was submitted" in err and "Traceback" not in err and "sbatch" not in err, err
    assert not Path(tmp_path / "plans").exists() or not any(Path(tmp_path / "plans").iterdir())


def test_env_sh_exports_the_state_it_was_given(tmp_path):
    var = "BRIDGEBENCH_SLURM_STATE"
    env = {**os.environ, var: str(tmp_path / "st")}
    out = subprocess.run(
        [str(REPO_ROOT / "launch" / "cluster" / "env.sh")], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert f"export SLURM_CONF={tmp_path}/st/etc/slurm.conf" in out and f"export {var}={tmp_path}/st" in out


def test_submit_wait_of_a_sweep_follows_its_cluster():
    """``bridgebench submit -m experiment=optstep_local optimizer=muon,adamw --wait`` (the README's walkthrough)
    submitted its runs, then ended in Hydra's "Ambiguous value" error when --wait composed the sweep as one config."""
    from bridgebench.cli.runs import _cluster_cfg
    from bridgebench.config.compose import ConfigError

    cfg = _cluster_cfg(["experiment=optstep_local", "optimizer=muon,adamw"])
    assert cfg.cluster.name == "local"
    with pytest.raises(ConfigError, match="varies it \\(cluster\\)"):
        _cluster_cfg(["experiment=optstep_local", "cluster=local,local_remote"])
