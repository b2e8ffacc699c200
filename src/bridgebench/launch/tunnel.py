"""nemo-run's tunnels, made in one place: the SSH tunnel to a login node (host, user, port, key) and what
bridgebench does through it besides submitting -- SLURM client commands and fetching a job's folder back.

nemo-run 0.11.1's ``SSHTunnel`` connects with fabric / paramiko (key authentication with ``identity``, else the
ssh-agent and ``~/.ssh`` defaults, then a password prompt) and calls ``sys.exit(1)`` when authentication fails; its
submission copies the experiment folder with ``rsync -e 'ssh -i <identity> -p <port>'``, so the login node's host
key must be in the submitting user's ``known_hosts`` (as for any ``ssh`` to it). Here:

* :func:`ssh_tunnel` builds the tunnel from ``cluster.tunnel`` (``host``, ``user``, ``port``, ``identity``,
  ``job_dir``); one connected tunnel per login node is reused by :func:`run_remote` and :func:`fetch_dir` within a
  process (SLURM polling makes several calls per refresh);
* a failed connection or authentication -- nemo-run's ``sys.exit`` included -- becomes :class:`TunnelError` naming
  the login node and the cause, never a silent exit;
* :func:`fetch_dir` copies a job folder on the cluster (logs, ``out/``) into its mirror on the submit side over SFTP,
  file by file, skipping files already fetched with the same size and modification time, so ``collect``, ``status``
  and ``logs follow`` read the job's logs locally whatever the tunnel.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from pathlib import Path
from typing import Any

from bridgebench.errors import BridgebenchError

#: Seconds to wait for the TCP connection and the SSH handshake of a login node.
CONNECT_TIMEOUT_S = 10.0

_OPEN: dict[tuple, Any] = {}


class TunnelError(BridgebenchError):
    """The login node could not be reached or refused the key; the message names it and the cause."""


def _key(cluster) -> tuple:
    t = cluster.tunnel
    return (str(t.host), str(t.user), int(t.get("port") or 22), str(t.get("identity") or ""))


def identity_path(cluster) -> str | None:
    """The SSH private key of ``cluster.tunnel.identity`` as an absolute path (``~`` expanded; relative paths are
    under the repository), or None."""
    value = cluster.tunnel.get("identity")
    if not value:
        return None
    from bridgebench.paths import REPO_ROOT

    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() else REPO_ROOT / path)


def ssh_tunnel(cluster, job_dir: str):
    """A new nemo-run ``SSHTunnel`` to ``cluster.tunnel`` whose job folder is ``job_dir`` (not connected yet).

    Raises:
        bridgebench.launch.shellsafe.LaunchConfigError: an unsafe host or user name.
    """
    import nemo_run as run

    from bridgebench.launch import shellsafe

    t = cluster.tunnel
    shellsafe.check("name", t.host, "ssh host")
    shellsafe.check("name", t.user, "ssh user")
    port = t.get("port")
    return run.SSHTunnel(
        host=str(t.host),
        user=str(t.user),
        port=int(port) if port else None,
        identity=identity_path(cluster),
        job_dir=str(job_dir),
    )


def connect(tunnel) -> None:
    """Connect ``tunnel`` (nemo-run's ``SSHTunnel.connect``), turning its failures into :class:`TunnelError`."""
    where = f"{tunnel.user}@{tunnel.host}:{tunnel.port or 22}"
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # nemo-run logs "Connecting to ..." on its console
            tunnel.connect()
    except SystemExit as err:  # nemo-run's SSHTunnel._authenticate: sys.exit(1) when no method authenticated
        key = f" with key {tunnel.identity}" if tunnel.identity else ""
        raise TunnelError(f"SSH authentication to {where}{key} failed (exit {err.code})") from None
    except Exception as err:  # paramiko / socket errors
        raise TunnelError(f"cannot connect to {where}: {err}") from err
    if not (tunnel.session and tunnel.session.is_connected):
        raise TunnelError(f"cannot connect to {where}")


def shared(cluster):
    """The process's connected tunnel to ``cluster``'s login node (made and connected on first use).

    Raises:
        TunnelError: the login node cannot be reached or refuses the key.
    """
    key = _key(cluster)
    tunnel = _OPEN.get(key)
    if tunnel is None or not (tunnel.session and tunnel.session.is_connected):
        tunnel = ssh_tunnel(cluster, str(cluster.tunnel.job_dir))
        connect(tunnel)
        _OPEN[key] = tunnel
    return tunnel


def run_remote(cluster, command: str, *, timeout: float):
    """Run ``command`` (one shell string, already quoted by the caller: ``shlex.join``) on the login node; returns
    invoke's ``Result`` (``return_code``, ``stdout``, ``stderr``).

    Raises:
        TunnelError: the tunnel is down (connection, authentication, or no answer within ``timeout``).
    """
    tunnel = shared(cluster)
    try:
        return tunnel.run(command, hide=True, warn=True, timeout=timeout)
    except Exception as err:  # invoke CommandTimedOut, paramiko errors
        _OPEN.pop(_key(cluster), None)
        raise TunnelError(f"{command.split(' ', 1)[0]} on {tunnel.host}: {err}") from err


def fetch_dir(cluster, remote_dir: str, local_dir: Path) -> int:
    """Copy the files under ``remote_dir`` on the login node into ``local_dir`` (same layout) over SFTP; files
    already there with the same size and modification time are skipped. Returns the number of files copied; a
    missing ``remote_dir`` copies nothing.

    Raises:
        TunnelError: the tunnel is down.
    """
    tunnel = shared(cluster)
    try:
        sftp = tunnel.session.sftp()
    except Exception as err:
        raise TunnelError(f"SFTP to {tunnel.host}: {err}") from err
    copied = 0

    def walk(remote: str, local: Path) -> None:
        nonlocal copied
        try:
            entries = sftp.listdir_attr(remote)
        except FileNotFoundError:
            return
        for e in entries:
            r, loc = f"{remote.rstrip('/')}/{e.filename}", local / e.filename
            if stat.S_ISDIR(e.st_mode or 0):
                walk(r, loc)
            elif stat.S_ISREG(e.st_mode or 0):
                try:
                    st = loc.stat()
                    if st.st_size == e.st_size and int(st.st_mtime) == int(e.st_mtime or 0):
                        continue
                except FileNotFoundError:
                    pass
                loc.parent.mkdir(parents=True, exist_ok=True)
                sftp.get(r, str(loc))
                os.utime(loc, (e.st_atime or e.st_mtime or 0, e.st_mtime or 0))
                copied += 1

    try:
        walk(remote_dir, Path(local_dir))
    except OSError as err:
        _OPEN.pop(_key(cluster), None)
        raise TunnelError(f"fetching {remote_dir} from {tunnel.host}: {err}") from err
    return copied


def remove_tree(tunnel, remote_dir: str) -> bool:
    """Delete ``remote_dir`` and everything under it on the login node over SFTP (no shell); False when it did not
    exist. ``tunnel``: a connected nemo-run ``SSHTunnel``.

    Raises:
        TunnelError: SFTP failed.
    """
    try:
        sftp = tunnel.session.sftp()
    except Exception as err:
        raise TunnelError(f"SFTP to {tunnel.host}: {err}") from err

    def rm(path: str) -> None:
        for e in sftp.listdir_attr(path):
            child = f"{path.rstrip('/')}/{e.filename}"
            if stat.S_ISDIR(e.st_mode or 0):
                rm(child)
            else:
                sftp.remove(child)
        sftp.rmdir(path)

    try:
        sftp.stat(remote_dir)
    except FileNotFoundError:
        return False
    try:
        rm(remote_dir)
    except OSError as err:
        raise TunnelError(f"removing {remote_dir} on {tunnel.host}: {err}") from err
    return True
