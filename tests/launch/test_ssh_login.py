"""SSH to the login node as OpenSSH does it (issue 24), for real on loopback against the emulated login node
(launch/remote/, a private sshd on 127.0.0.1; the session fixture of tests/launch/test_remote_cluster.py starts it):

* the host key is checked against the known_hosts file the cluster names (``cluster.tunnel.known_hosts``): a
  different key and an unknown key are refused naming rule ``ssh_host_key`` (fabric's ``AutoAddPolicy`` used to
  accept both); an unknown key is pinned only with ``cluster.tunnel.accept_new_host_key=true``, said on stderr, and a
  different key is refused even then;
* an identity file readable by group or others is refused before it is used (rule ``ssh_identity_private``);
* a key the login node refuses is an error at once, on a terminal too -- never a ``Password:`` prompt;
* ``launch/remote/up.sh`` keeps the login node's key in its own known_hosts and never edits ``~/.ssh/known_hosts``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.launch.test_local_cluster import slurm_cluster  # noqa: F401  (session fixture)
from tests.launch.test_remote_cluster import REMOTE, rbb, remote_cluster  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slurm


@pytest.fixture()
def login(remote_cluster, monkeypatch):  # noqa: F811
    """The composed local_remote cluster node and the emulation's ssh folder."""
    for key in ("BRIDGEBENCH_REMOTE_ROOT", "BRIDGEBENCH_REMOTE_SSH_PORT", "BRIDGEBENCH_REMOTE_USER"):
        monkeypatch.setenv(key, remote_cluster[key])
    from bridgebench.config.compose import compose

    cluster = compose(["experiment=optstep_local", "cluster=local_remote"]).cluster
    return OmegaConf.create(OmegaConf.to_container(cluster, resolve=True)), Path(
        remote_cluster["BRIDGEBENCH_REMOTE_ROOT"], "ssh"
    )


def connect(cluster):
    from bridgebench.launch import tunnel as tun

    t = tun.ssh_tunnel(cluster, str(cluster.tunnel.job_dir))
    try:
        tun.connect(t)
        return t.session.run("echo ok", hide=True).stdout.strip()
    finally:
        t.cleanup()


def other_key(tmp_path: Path, name: str) -> Path:
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def test_the_emulations_own_known_hosts_lets_bridgebench_in(login):
    cluster, ssh_dir = login
    assert cluster.tunnel.known_hosts == str(ssh_dir / "known_hosts") and (ssh_dir / "known_hosts").exists()
    assert connect(cluster) == "ok"


def test_up_sh_never_touches_the_users_known_hosts(remote_cluster, tmp_path):  # noqa: F811
    """up.sh run again with HOME elsewhere: ~/.ssh is neither made nor edited (the key is in the state's file)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**remote_cluster, "HOME": str(home)}
    up = Path(__file__).resolve().parents[2] / "launch" / "remote" / "up.sh"
    res = subprocess.run([str(up)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    user_kh = Path(os.path.expanduser("~root")) / ".ssh" / "known_hosts"
    port = remote_cluster["BRIDGEBENCH_REMOTE_SSH_PORT"]
    assert not (home / ".ssh").exists()
    assert f"[127.0.0.1]:{port}" not in (user_kh.read_text() if user_kh.exists() else "")
    assert "known_hosts" in Path(up).read_text() and "~/.ssh/known_hosts" not in _commands(up)


def _commands(script: Path) -> str:
    """The script without its comments."""
    return "\n".join(line.split("#", 1)[0] for line in script.read_text().splitlines())


def test_a_different_host_key_is_refused(login, tmp_path):
    from bridgebench.launch.tunnel import TunnelError

    cluster, ssh_dir = login
    impostor = other_key(tmp_path, "impostor")
    entry = f"[127.0.0.1]:{cluster.tunnel.port}"
    (tmp_path / "kh").write_text(f"{entry} {' '.join(Path(f'{impostor}.pub').read_text().split()[:2])}\n")
    cluster.tunnel.known_hosts = str(tmp_path / "kh")
    with pytest.raises(TunnelError) as err:
        connect(cluster)
    assert "ssh_host_key" in str(err.value) and "holds SHA256:" in str(err.value) and "refused" in str(err.value)
    cluster.tunnel.accept_new_host_key = True  # pinning on first use never replaces a known key
    with pytest.raises(TunnelError, match="ssh_host_key"):
        connect(cluster)


def test_submit_to_an_impostor_is_refused_before_anything_is_sent(rbb, login, tmp_path):  # noqa: F811
    cluster, _ = login
    impostor = other_key(tmp_path, "impostor")
    kh = tmp_path / "kh"
    kh.write_text(f"[127.0.0.1]:{cluster.tunnel.port} {' '.join(Path(f'{impostor}.pub').read_text().split()[:2])}\n")
    jobs = Path(cluster.tunnel.job_dir)
    before = sorted(jobs.rglob("*")) if jobs.exists() else []
    res = rbb("submit", *REMOTE, f"cluster.tunnel.known_hosts={kh}", check=False, timeout=300)
    assert res.returncode == 2 and "ssh_host_key" in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert (sorted(jobs.rglob("*")) if jobs.exists() else []) == before  # nothing reached the "cluster"
    assert not list(Path(rbb.env["BRIDGEBENCH_JOB_DIR"]).rglob("*.sbatch.sh"))


@pytest.mark.parametrize("known_hosts", ["empty", "missing"])
def test_an_unknown_host_key_is_refused_unless_pinning_is_asked_for(login, tmp_path, capfd, known_hosts):
    from bridgebench.launch.tunnel import TunnelError

    cluster, ssh_dir = login
    kh = tmp_path / "sub" / "kh"
    if known_hosts == "empty":
        kh.parent.mkdir()
        kh.write_text("")
    cluster.tunnel.known_hosts = str(kh)
    with pytest.raises(TunnelError) as err:
        connect(cluster)
    assert "ssh_host_key" in str(err.value) and "is not in" in str(err.value) and "SHA256:" in str(err.value)
    assert not kh.exists() or kh.read_text() == ""
    cluster.tunnel.accept_new_host_key = True
    assert connect(cluster) == "ok"
    assert "pinned the host key" in capfd.readouterr().err
    pinned = kh.read_text().split()
    assert pinned[0] == f"[127.0.0.1]:{cluster.tunnel.port}"
    assert pinned[1:3] == (ssh_dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    if known_hosts == "missing":
        assert (kh.stat().st_mode & 0o077) == 0  # made private, as ssh makes it
    cluster.tunnel.accept_new_host_key = False  # pinned: strict checking now lets it in
    assert connect(cluster) == "ok"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_an_identity_file_readable_by_others_is_refused(login, tmp_path, mode):
    from bridgebench.launch.tunnel import TunnelError

    cluster, ssh_dir = login
    key = tmp_path / "id_ed25519"
    shutil.copyfile(ssh_dir / "id_ed25519", key)
    key.chmod(mode)
    cluster.tunnel.identity = str(key)
    with pytest.raises(TunnelError) as err:
        connect(cluster)
    assert (
        "ssh_identity_private" in str(err.value) and f"{mode:04o}" in str(err.value) and "chmod 600" in str(err.value)
    )
    key.chmod(0o600)
    assert connect(cluster) == "ok"


def test_a_refused_key_fails_at_once_even_on_a_terminal(rbb, login, tmp_path):  # noqa: F811
    """A key the login node does not accept, with a terminal attached (``script`` gives the command a pty, where
    nemo-run 0.11.1 fell back to keyboard-interactive and ``Password:`` prompts): an error naming the key within
    seconds, no prompt."""
    cluster, _ = login
    stranger = other_key(tmp_path, "stranger")
    cmd = [sys.executable, "-m", "bridgebench.cli", "submit", *REMOTE, f"cluster.tunnel.identity={stranger}"]
    t0 = time.monotonic()
    res = subprocess.run(
        ["script", "-qefc", subprocess.list2cmdline(cmd), "/dev/null"],
        env=rbb.env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    took = time.monotonic() - t0
    out = res.stdout + res.stderr
    assert res.returncode == 2, out[-2000:]
    assert "refused the key" in out and str(stranger) in out and "no password prompt" in out, out[-2000:]
    assert "password:" not in out.lower().replace("no password prompt", ""), out[-2000:]
    assert took < 120, took


def test_status_and_cancel_never_trust_an_impostor(rbb, login, tmp_path):  # noqa: F811
    """A job submitted to the real login node; then the key in the cluster's known_hosts is not the login node's
    (an impostor answering, as seen from bridgebench): ``status`` still shows the ledger, the job UNKNOWN with the
    ``ssh_host_key`` refusal as the cause, and ``cancel`` refuses to act -- nothing is asked of the impostor."""
    cluster, ssh_dir = login
    res = rbb("submit", *REMOTE, "job.repeats=1", "--json")
    (a,) = [r for r in json.loads(res.stdout)]
    kh = ssh_dir / "known_hosts"
    real = kh.read_text()
    impostor = other_key(tmp_path, "impostor")
    try:
        kh.write_text(
            f"[127.0.0.1]:{cluster.tunnel.port} {' '.join(Path(f'{impostor}.pub').read_text().split()[:2])}\n"
        )
        st = rbb("status", "cluster=local_remote", "--json", check=False)
        assert st.returncode == 0, st.stderr[-2000:]
        (row,) = [r for r in json.loads(st.stdout) if r["run_id"] == a["run_id"]]
        assert row["state"] == "UNKNOWN" and "ssh_host_key" in st.stderr, (row["state"], st.stderr[-2000:])
        cancel = rbb("cancel", "--cluster", "local_remote", a["run_id"], check=False)
        assert cancel.returncode != 0 and "ssh_host_key" in cancel.stderr, cancel.stderr[-2000:]
    finally:
        kh.write_text(real)
    rbb("cancel", "--cluster", "local_remote", a["run_id"], check=False)
