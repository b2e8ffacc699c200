"""SLURM client commands on the submit side (``squeue``, ``sacct``, ``sinfo``, ``scancel``, ``scontrol``): argument
lists, never shell strings, locally or over nemo-run's SSH tunnel (``shlex.join``). A command that cannot reach its
daemon raises :class:`SlurmUnreachable` with a hint, so callers can degrade (``status`` still shows the ledger).

Before asking SLURM, :func:`probe` finds in well under a second what would make every command fail or hang: for a
local tunnel a ``slurm.conf`` that does not exist (the local cluster was never started, or ``SLURM_CONF`` points
elsewhere) and daemons whose TCP port refuses connections (read from that ``slurm.conf``: ``SlurmctldHost`` /
``SlurmctldPort``, ``AccountingStorageHost`` / ``AccountingStoragePort``); for an SSH tunnel a login node that does
not accept TCP connections. ``status`` then answers at once with that cause instead of waiting for SLURM's own
retries and time-outs.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bridgebench.errors import BridgebenchError
from bridgebench.paths import REPO_ROOT

TIMEOUT_S = 30
#: Seconds a TCP probe of a daemon or login node waits.
PROBE_TIMEOUT_S = 2.0
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"


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
    if cfg.cluster.name == "local_remote":
        return "start the emulated remote cluster with `make remote-up` (launch/remote/up.sh)"
    return f"check the SSH tunnel to {cfg.cluster.tunnel.host} and that SLURM answers there (sinfo)"


def run(cmd: list[str], cfg: DictConfig, *, timeout: float = TIMEOUT_S) -> str:
    """Run a SLURM client command (argument list) and return its stdout.

    Raises:
        SlurmUnreachable: the command could not reach its daemon, timed out, or is not installed.
        SlurmError: any other failure.
    """
    if cfg.cluster.tunnel.type != "local":
        from bridgebench.launch.tunnel import TunnelError, run_remote

        try:
            res = run_remote(cfg.cluster, shlex.join(cmd), timeout=timeout)
        except TunnelError as err:  # the tunnel itself is down
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


@dataclass(kw_only=True)
class Reach:
    """What :func:`probe` found: ``controller`` / ``accounting`` = why slurmctld / slurmdbd cannot be reached (None:
    no obstacle found -- SLURM may still fail, its own error then says why); :func:`hint` says what to do."""

    controller: str | None = None
    accounting: str | None = None

    @property
    def none(self) -> bool:
        """Neither daemon can be reached."""
        return self.controller is not None and self.accounting is not None


def slurm_conf(cfg: DictConfig) -> Path:
    """The ``slurm.conf`` SLURM's client commands read here: ``SLURM_CONF`` of :func:`client_env`, else
    :data:`DEFAULT_SLURM_CONF`."""
    return Path(client_env(cfg).get("SLURM_CONF") or DEFAULT_SLURM_CONF)


def _conf_value(text: str, key: str) -> str | None:
    m = re.search(rf"(?im)^\s*{key}\s*=\s*(\S+)", text)
    return m.group(1) if m else None


def _tcp(host: str, port: int) -> str | None:
    """None when ``host:port`` accepts a TCP connection within :data:`PROBE_TIMEOUT_S`, else why not."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except OSError as err:
        return f"{err.strerror or err}" if not isinstance(err, TimeoutError) else f"no answer in {PROBE_TIMEOUT_S:g} s"


def probe(cfg: DictConfig) -> Reach:
    """Find quickly (at most two TCP connects of :data:`PROBE_TIMEOUT_S`) what keeps SLURM from answering; see the
    module docstring. Never raises."""
    if cfg.cluster.tunnel.type != "local":
        host, port = str(cfg.cluster.tunnel.host), int(cfg.cluster.tunnel.get("port") or 22)
        why = _tcp(host, port)
        if why is not None:
            cause = f"the login node {host}:{port} does not accept SSH connections ({why})"
            return Reach(controller=cause, accounting=cause)
        return Reach()
    conf = slurm_conf(cfg)
    if not conf.is_file():
        how = "SLURM_CONF" if client_env(cfg).get("SLURM_CONF") else "the default slurm.conf"
        cause = f"{how} {conf} does not exist, so no SLURM command can find the cluster"
        return Reach(controller=cause, accounting=cause)
    try:
        text = conf.read_text(errors="replace")
    except OSError as err:
        cause = f"cannot read {conf} ({err})"
        return Reach(controller=cause, accounting=cause)
    out = Reach()
    ctld = _conf_value(text, "SlurmctldHost") or _conf_value(text, "ControlMachine")
    if ctld:
        m = re.match(r"^([^(]+)(?:\(([^)]+)\))?$", ctld)
        host = (m.group(2) or m.group(1)) if m else ctld
        port = int(_conf_value(text, "SlurmctldPort") or 6817)
        why = _tcp(host, port)
        if why is not None:
            out.controller = f"slurmctld at {host}:{port} ({conf}) is not answering: {why}"
    if (_conf_value(text, "AccountingStorageType") or "").endswith("slurmdbd"):
        host = _conf_value(text, "AccountingStorageHost") or "localhost"
        port = int(_conf_value(text, "AccountingStoragePort") or 6819)
        why = _tcp(host, port)
        if why is not None:
            out.accounting = f"slurmdbd at {host}:{port} ({conf}) is not answering: {why}"
    return out


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
