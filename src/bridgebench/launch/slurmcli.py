"""SLURM client commands on the submit side (``squeue``, ``sacct``, ``sinfo``, ``scancel``, ``scontrol``): argument
lists, never shell strings, locally or over nemo-run's SSH tunnel (``shlex.join``). A command that cannot reach its
daemon raises :class:`SlurmUnreachable` with a hint, so callers can degrade (``status`` still shows the ledger)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bridgebench.errors import BridgebenchError
from bridgebench.paths import REPO_ROOT

TIMEOUT_S = 30


class SlurmError(BridgebenchError, RuntimeError):
    """A SLURM command failed; the message names the command and SLURM's error."""


class SlurmUnreachable(SlurmError):
    """A SLURM command could not reach slurmctld / slurmdbd (cluster down, tunnel broken)."""


def client_env(cfg: DictConfig) -> dict[str, str]:
    """The process environment plus ``cluster.client_env`` (relative paths under the repository)."""
    env = dict(os.environ)
    for key, value in OmegaConf.to_container(cfg.cluster.client_env, resolve=True).items():
        path = Path(value)
        env[key] = str(path if path.is_absolute() or "/" not in value else REPO_ROOT / path)
    return env


def hint(cfg: DictConfig) -> str:
    """How to start or reach the cluster, for messages."""
    if cfg.cluster.tunnel.type == "local" and cfg.cluster.name == "local":
        return "start it with `make cluster-up` (launch/cluster/up.sh), or check `make cluster-status`"
    if cfg.cluster.tunnel.type == "local":
        return f"check that SLURM answers on this host (sinfo; SLURM_CONF) for cluster {cfg.cluster.name}"
    return f"check the SSH tunnel to {cfg.cluster.tunnel.host} and that SLURM answers there (sinfo)"


def run(cmd: list[str], cfg: DictConfig, *, timeout: float = TIMEOUT_S) -> str:
    """Run a SLURM client command (argument list) and return its stdout.

    Raises:
        SlurmUnreachable: the command could not reach its daemon, timed out, or is not installed.
        SlurmError: any other failure.
    """
    if cfg.cluster.tunnel.type != "local":
        import nemo_run as nrun

        tunnel = nrun.SSHTunnel(
            host=cfg.cluster.tunnel.host, user=cfg.cluster.tunnel.user, job_dir=str(cfg.cluster.tunnel.job_dir)
        )
        try:
            res = tunnel.run(shlex.join(cmd), hide=True, warn=True)
        except Exception as err:  # paramiko / invoke errors: the tunnel itself is down
            raise SlurmUnreachable(f"{cmd[0]} on {cfg.cluster.tunnel.host}: {err}; {hint(cfg)}") from err
        code, stdout, stderr = res.return_code, res.stdout, res.stderr
    else:
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, env=client_env(cfg), timeout=timeout)
        except FileNotFoundError as err:
            raise SlurmUnreachable(f"{cmd[0]} is not installed here ({err}); {hint(cfg)}") from err
        except subprocess.TimeoutExpired as err:
            raise SlurmUnreachable(f"{cmd[0]} did not answer within {timeout:.0f} s; {hint(cfg)}") from err
        code, stdout, stderr = res.returncode, res.stdout, res.stderr
    if code:
        text = " ".join(stderr.strip().split())[:400]
        if unreachable_text(text):
            raise SlurmUnreachable(f"{cmd[0]}: {text}; {hint(cfg)}")
        raise SlurmError(f"{shlex.join(cmd)} failed: {text}")
    return stdout


def unreachable_text(text: str) -> bool:
    """True when a SLURM error message says the daemon could not be reached."""
    low = text.lower()
    return any(
        s in low
        for s in (
            "connection refused",
            "unable to contact slurm controller",
            "unable to connect",
            "problem talking to the database",
            "could not establish a configuration source",
            "socket timed out",
            "slurm_persist_conn_open",
            "no such file or directory",
            "zero bytes were transmitted",
        )
    )
