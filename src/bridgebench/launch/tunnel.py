"""nemo-run's tunnels, made in one place: the SSH tunnel to a login node (host, user, port, key, known_hosts) and what
bridgebench does through it besides submitting -- SLURM client commands and fetching a job's folder back.

SSH as OpenSSH does it. nemo-run 0.11.1's ``SSHTunnel`` connects with fabric 3.2 / paramiko, whose ``Connection`` sets
``AutoAddPolicy`` (any host key accepted, none loaded: an impostor login node would be trusted by ``submit``,
``status``, ``collect`` and ``cancel``), falls back to keyboard-interactive and password prompts on a terminal when the
key is refused, and calls ``sys.exit(1)`` when nothing authenticates; its submission copies the experiment folder
with ``rsync --rsh='ssh -i <identity> -p <port>'`` formatted into a local shell string (``core/tunnel/rsync.py``).
Here instead:

* :class:`VerifiedSSHTunnel` (a nemo-run ``SSHTunnel``: nemo-run's submission uses it as its own) authenticates as
  ``ssh -o BatchMode=yes -o StrictHostKeyChecking=yes`` would: the login node's host key must be in the known_hosts
  file the cluster names (``cluster.tunnel.known_hosts``, default ``~/.ssh/known_hosts``) and equal to it (rule
  ``ssh_host_key``) -- an unknown key is pinned only when ``cluster.tunnel.accept_new_host_key`` is true (OpenSSH's
  ``accept-new``), and then said on stderr; public-key authentication only (with ``identity``: that key alone, as
  ``IdentitiesOnly``; else the ssh-agent and ``~/.ssh`` default keys), so a refused key is a :class:`TunnelError`
  at once, never a prompt; an identity file readable or writable by group or others is refused before it is used
  (rule ``ssh_identity_private``, OpenSSH's ``sshkey_perm_ok``);
* :func:`rsync_argv` is the job folder's copy: an argv list run without a shell, its ``--rsh`` words checked by
  :mod:`bridgebench.launch.shellsafe` and ``shlex``-quoted, ``ssh`` in batch mode against the same known_hosts;
  :func:`own_rsync` puts it in place of nemo-run's while a job is submitted (:mod:`bridgebench.launch.nemorun`);
* :func:`ssh_tunnel` builds the tunnel from ``cluster.tunnel``; one connected tunnel per login node is reused by
  :func:`run_remote` and :func:`fetch_dir` within a process (SLURM polling makes several calls per refresh);
* a failed connection or authentication -- nemo-run's ``sys.exit`` included -- becomes :class:`TunnelError` naming
  the login node, the cause and the rule, never a silent exit;
* :func:`fetch_dir` copies a job folder on the cluster (logs, ``out/``) into its mirror on the submit side over SFTP,
  file by file, skipping files already fetched with the same size and modification time, so ``collect``, ``status``
  and ``logs follow`` read the job's logs locally whatever the tunnel.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import io
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

from bridgebench.errors import BridgebenchError
from bridgebench.launch import shellsafe

#: Seconds to wait for the TCP connection and the SSH handshake of a login node.
CONNECT_TIMEOUT_S = 10.0
#: OpenSSH's default user known_hosts file (ssh_config(5) UserKnownHostsFile).
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
#: Seconds the job folder's rsync may take before it is called failed.
RSYNC_TIMEOUT_S = 600.0

_OPEN: dict[tuple, Any] = {}


class TunnelError(BridgebenchError):
    """The login node could not be reached, could not be verified or refused the key; the message names it, the
    cause and (for a host key or an identity file) the rule."""


def _key(cluster) -> tuple:
    t = cluster.tunnel
    return (
        str(t.host),
        str(t.user),
        int(t.get("port") or 22),
        str(t.get("identity") or ""),
        str(t.get("known_hosts") or ""),
        bool(t.get("accept_new_host_key") or False),
    )


def _local_path(value: Any) -> str:
    from bridgebench.paths import REPO_ROOT

    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() else REPO_ROOT / path)


def identity_path(cluster) -> str | None:
    """The SSH private key of ``cluster.tunnel.identity`` as an absolute path (``~`` expanded; relative paths are
    under the repository), or None."""
    value = cluster.tunnel.get("identity")
    return _local_path(value) if value else None


def known_hosts_path(cluster) -> str:
    """The known_hosts file of ``cluster.tunnel.known_hosts`` as an absolute path (default
    :data:`DEFAULT_KNOWN_HOSTS`, as OpenSSH; ``~`` expanded; relative paths are under the repository)."""
    return _local_path(cluster.tunnel.get("known_hosts") or DEFAULT_KNOWN_HOSTS)


def check_identity(path: str) -> None:
    """Refuse an identity file OpenSSH would refuse (rule ``ssh_identity_private``): missing, not a regular file, or
    with any group/other permission bit (``mode & 0o077``; OpenSSH ``authfile.c`` ``sshkey_perm_ok``).

    Raises:
        TunnelError: naming the file, its mode and the fix (``chmod 600``).
    """
    try:
        st = os.stat(path)
    except OSError as err:
        raise TunnelError(
            f"ssh_identity_private: the identity file {path} (cluster.tunnel.identity) cannot be read: {err.strerror}"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise TunnelError(f"ssh_identity_private: the identity file {path} (cluster.tunnel.identity) is not a file")
    if st.st_mode & 0o077:
        raise TunnelError(
            f"ssh_identity_private: the identity file {path} (cluster.tunnel.identity) has mode "
            f"{stat.S_IMODE(st.st_mode):04o}: a private key readable or writable by group or others is refused, as "
            f"OpenSSH refuses it ('UNPROTECTED PRIVATE KEY FILE'); run `chmod 600 {shlex.quote(path)}`"
        )


def fingerprint(key) -> str:
    """OpenSSH's SHA256 fingerprint of a paramiko public key (``ssh-keygen -l``: base64 of the SHA-256 of the key
    blob, padding dropped)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _host_entry(host: str, port: int | None) -> str:
    """The known_hosts name of a login node: ``host`` on port 22, else ``[host]:port`` (sshd(8) SSH_KNOWN_HOSTS)."""
    return host if not port or int(port) == 22 else f"[{host}]:{int(port)}"


def _host_key_policy(known_hosts: str, accept_new: bool):
    import paramiko

    class Policy(paramiko.MissingHostKeyPolicy):
        """An unknown host key: refused (rule ``ssh_host_key``), or -- only when asked -- pinned into
        ``known_hosts`` and said."""

        def missing_host_key(self, client, hostname, key) -> None:
            where = f"{hostname} ({key.get_name()} {fingerprint(key)})"
            if not accept_new:
                raise UnknownHostKey(
                    f"ssh_host_key: the login node {where} is not in {known_hosts} (cluster.tunnel.known_hosts); "
                    f"check its fingerprint with the cluster's admins, then add it (ssh-keyscan -p PORT HOST, or one "
                    f"`ssh` to it), or set cluster.tunnel.accept_new_host_key=true to pin it on first use"
                )
            path = Path(known_hosts)
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            client.get_host_keys().add(hostname, key.get_name(), key)
            print(
                f"ssh: pinned the host key of {where} into {known_hosts} on first use "
                f"(cluster.tunnel.accept_new_host_key=true); a different key will be refused",
                file=sys.stderr,
            )

    return Policy()


class UnknownHostKey(Exception):
    """Raised by the host-key policy: the login node's key is not in known_hosts (carried out of paramiko)."""


def _authenticate(tunnel) -> None:
    """Connect ``tunnel`` (a :class:`VerifiedSSHTunnel`) as OpenSSH in batch mode would (module docstring).

    Raises:
        TunnelError: identity refused by rule, host key unknown or different, authentication refused, unreachable.
    """
    import paramiko
    from fabric import Config, Connection

    where = f"{tunnel.user}@{tunnel.host}:{tunnel.port or 22}"
    if tunnel.identity:
        check_identity(str(tunnel.identity))
    known_hosts = str(Path(tunnel.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser())
    kwargs: dict[str, Any] = {  # the TCP connect timeout is fabric's connect_timeout below
        "banner_timeout": CONNECT_TIMEOUT_S,
        "auth_timeout": CONNECT_TIMEOUT_S,
    }
    if tunnel.identity:  # that key alone (OpenSSH IdentitiesOnly=yes)
        kwargs.update(key_filename=[str(tunnel.identity)], look_for_keys=False, allow_agent=False)
    session = Connection(
        tunnel.host,
        port=tunnel.port,
        user=tunnel.user,
        connect_kwargs=kwargs,
        forward_agent=False,
        connect_timeout=int(CONNECT_TIMEOUT_S),
        config=Config(overrides={"run": {"in_stream": False}}),
    )
    client = session.client
    client.get_host_keys().clear()
    if os.path.exists(known_hosts):
        try:
            client.get_host_keys().load(known_hosts)
        except (OSError, paramiko.SSHException) as err:
            raise TunnelError(f"ssh_host_key: cannot read {known_hosts} (cluster.tunnel.known_hosts): {err}") from None
    client.set_missing_host_key_policy(_host_key_policy(known_hosts, bool(tunnel.accept_new_host_key)))
    try:
        session.open()
    except UnknownHostKey as err:
        session.close()
        raise TunnelError(str(err)) from None
    except paramiko.BadHostKeyException as err:
        session.close()
        raise TunnelError(
            f"ssh_host_key: the login node {where} presented a {err.key.get_name()} key {fingerprint(err.key)}, "
            f"but {known_hosts} (cluster.tunnel.known_hosts) holds {fingerprint(err.expected_key)} for it: "
            f"refused (an impostor, or a reinstalled login node: ask the cluster's admins before replacing the entry)"
        ) from None
    except paramiko.PasswordRequiredException:
        session.close()
        raise TunnelError(
            f"SSH key {tunnel.identity} for {where} is encrypted: load it into ssh-agent and leave "
            f"cluster.tunnel.identity unset (bridgebench never prompts for a passphrase)"
        ) from None
    except paramiko.AuthenticationException as err:
        session.close()
        key = f"the key {tunnel.identity}" if tunnel.identity else "the ssh-agent's and ~/.ssh's default keys"
        raise TunnelError(
            f"SSH authentication to {where} failed: the login node refused {key} ({err}); bridgebench "
            f"authenticates in batch mode (public key only, no password prompt)"
        ) from None
    except (OSError, paramiko.SSHException, EOFError) as err:
        session.close()
        raise TunnelError(f"cannot connect to {where}: {err or type(err).__name__}") from None
    tunnel.session = session


def _make_verified_class():
    import nemo_run as run

    @dataclasses.dataclass(kw_only=True)
    class VerifiedSSHTunnel(run.SSHTunnel):
        """nemo-run's ``SSHTunnel`` authenticating as OpenSSH in batch mode with strict host keys (module docstring):
        ``known_hosts`` is the file the login node's key is checked against (None: ``~/.ssh/known_hosts``);
        ``accept_new_host_key`` pins an unknown key on first use, saying so."""

        known_hosts: Optional[str] = None
        accept_new_host_key: bool = False

        def _authenticate(self) -> None:
            _authenticate(self)

    VerifiedSSHTunnel.__module__ = __name__
    VerifiedSSHTunnel.__qualname__ = "VerifiedSSHTunnel"
    return VerifiedSSHTunnel


def _tunnel_class():
    cls = globals().get("VerifiedSSHTunnel")
    if cls is None:
        cls = globals()["VerifiedSSHTunnel"] = _make_verified_class()
    return cls


def __getattr__(name: str) -> Any:
    """``VerifiedSSHTunnel`` is made on first use (it subclasses nemo-run's ``SSHTunnel``: nemo-run is imported only
    when a tunnel is needed), then kept as this module's attribute, where nemo-run's serializer finds it."""
    if name == "VerifiedSSHTunnel":
        return _tunnel_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def ssh_tunnel(cluster, job_dir: str):
    """A new :class:`VerifiedSSHTunnel` to ``cluster.tunnel`` whose job folder is ``job_dir`` (not connected yet).

    Raises:
        bridgebench.launch.shellsafe.ShellValueError: a tunnel field or resolved path that cannot reach the ssh /
            rsync command lines safely (rule ``shell_safe_value``).
    """
    t = cluster.tunnel
    port = t.get("port")
    fields = {
        "cluster.tunnel.host": ("host", t.host),
        "cluster.tunnel.user": ("name", t.user),
        "cluster.tunnel.port": ("port", port),
        "cluster.tunnel.job_dir": ("abspath", str(job_dir)),
    }
    identity = identity_path(cluster)
    known_hosts = known_hosts_path(cluster)
    fields["cluster.tunnel.identity (resolved)"] = ("path", identity)
    fields["cluster.tunnel.known_hosts (resolved)"] = ("path", known_hosts)
    for fld, (grammar, value) in fields.items():
        if value is not None:
            shellsafe.check(grammar, value, fld, "the ssh / rsync command lines on the submitting machine")
    return _tunnel_class()(
        host=str(t.host),
        user=str(t.user),
        port=int(port) if port else None,
        identity=identity,
        known_hosts=known_hosts,
        accept_new_host_key=bool(t.get("accept_new_host_key") or False),
        job_dir=str(job_dir),
    )


def same_tunnel(tunnel):
    """A new, unconnected tunnel with ``tunnel``'s login settings (host, user, port, identity, known_hosts)."""
    return _tunnel_class()(
        host=tunnel.host,
        user=tunnel.user,
        port=tunnel.port,
        identity=tunnel.identity,
        known_hosts=getattr(tunnel, "known_hosts", None),
        accept_new_host_key=bool(getattr(tunnel, "accept_new_host_key", False)),
        job_dir=tunnel.job_dir,
    )


def rsync_argv(tunnel, source: str, target: str) -> list[str]:
    """The argv (no shell) that copies the local folder ``source`` into ``target`` on ``tunnel``'s login node, as
    nemo-run 0.11.1's ``rsync`` means to (``-pthrz``, ``source`` without a trailing slash: the folder itself), with
    ``ssh`` in batch mode against the tunnel's known_hosts (``StrictHostKeyChecking=yes``,
    ``GlobalKnownHostsFile=/dev/null``: only the file the cluster names), ``IdentitiesOnly`` with an identity.
    Every value is checked (:mod:`bridgebench.launch.shellsafe`, rule ``shell_safe_value``) and the ``--rsh`` words
    are ``shlex``-quoted (rsync splits that one string itself, honouring quotes).

    Raises:
        bridgebench.launch.shellsafe.ShellValueError: a value that cannot reach the command line safely.
    """
    where = "the rsync / ssh command line on the submitting machine"
    host = shellsafe.check("host", tunnel.host, "cluster.tunnel.host", where)
    user = shellsafe.check("name", tunnel.user, "cluster.tunnel.user", where)
    known_hosts = str(Path(getattr(tunnel, "known_hosts", None) or DEFAULT_KNOWN_HOSTS).expanduser())
    ssh = [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "UserKnownHostsFile=" + shellsafe.check("path", known_hosts, "cluster.tunnel.known_hosts", where),
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        f"ConnectTimeout={int(CONNECT_TIMEOUT_S)}",
    ]
    if tunnel.identity:
        ssh += [
            "-o",
            "IdentitiesOnly=yes",
            "-i",
            shellsafe.check("path", tunnel.identity, "cluster.tunnel.identity", where),
        ]
    if tunnel.port:
        ssh += ["-p", shellsafe.check("port", str(tunnel.port), "cluster.tunnel.port", where)]
    src = shellsafe.check("path", str(source), "nemo-run experiment folder", where)
    dst = shellsafe.check("abspath", str(target), "cluster.tunnel.job_dir", where)
    return ["rsync", "-pthrz", "--rsh", shlex.join(ssh), "--", src, f"{user}@{host}:{dst}"]


def rsync_to(tunnel, session, source: str, target: str) -> None:
    """Copy ``source`` into ``target`` on the login node (:func:`rsync_argv`); ``target`` is made first over the
    connected ``session`` (``mkdir -p``, its words quoted).

    Raises:
        TunnelError: rsync failed (its last stderr lines in the message).
    """
    argv = rsync_argv(tunnel, source, target)
    session.run(shlex.join(["mkdir", "-p", "--", target]), hide=True)
    try:
        res = subprocess.run(
            argv, capture_output=True, text=True, timeout=RSYNC_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TunnelError(f"rsync of {source} to {tunnel.host}:{target} failed: {err}") from None
    if res.returncode:
        tail = " | ".join(res.stderr.strip().splitlines()[-3:])
        raise TunnelError(f"rsync of {source} to {tunnel.host}:{target} failed (exit {res.returncode}): {tail}")


@contextlib.contextmanager
def own_rsync(tunnel) -> Iterator[None]:
    """While a job is submitted: nemo-run's ``Experiment.run`` copies the experiment folder with
    :func:`rsync_to` (``tunnel``'s settings) instead of its own shell-string rsync."""
    from nemo_run.run import experiment

    original = experiment.rsync

    def rsync(c, source: str, target: str, *args: Any, **kwargs: Any) -> None:
        rsync_to(tunnel, c, source, target)

    experiment.rsync = rsync
    try:
        yield
    finally:
        experiment.rsync = original


def connect(tunnel) -> None:
    """Connect ``tunnel``, turning every failure into :class:`TunnelError` (nemo-run's ``sys.exit`` included)."""
    where = f"{tunnel.user}@{tunnel.host}:{tunnel.port or 22}"
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # nemo-run logs "Connecting to ..." on its console
            tunnel.connect()
    except TunnelError:
        raise
    except SystemExit as err:  # a plain nemo-run SSHTunnel: sys.exit(1) when no method authenticated
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
