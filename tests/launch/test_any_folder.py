"""The local SLURM cluster and the emulated login node from any folder (issue 24, "the walkthrough as written").

A checkout under /tmp (world-writable, sticky) broke ``make remote-up``: sshd's StrictModes refuses an authorized_keys
file under a folder others can write, sticky or not, and the only message was "Permission denied (publickey)" with
sshd left running. A checkout in a private home folder (0700, as root's is) or a state made by ``mktemp -d`` broke
every SLURM test: munged refuses a socket unless every folder above it is executable by all ("see log"). Now the
daemons' sockets and the login node's authorized_keys live in a runtime folder both accept
(``/run/bridgebench-<uid>/...``, launch/cluster/common.sh), an unusable one is refused naming the rule and the fix,
and a failed ``up.sh`` stops what it started.

One cluster (its own ports: the session's port base + 10 .. + 15) whose state and login-node root sit below a 0700
folder *and* a 1777 sticky folder -- both of the cases at once -- started once for the module; the failures are
provoked on the way (a taken slurmctld port, a login user sshd refuses).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.launch.small_optstep import BB, SMALL
from tests.launch.test_local_cluster import REPO, REQUIRED

pytestmark = pytest.mark.slurm
UP = REPO / "launch" / "cluster" / "up.sh"
DOWN = REPO / "launch" / "cluster" / "down.sh"
REMOTE_UP = REPO / "launch" / "remote" / "up.sh"
REMOTE_DOWN = REPO / "launch" / "remote" / "down.sh"
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")


def _marked(state: Path) -> list[str]:
    """``name pid`` of the live daemons started for ``state`` (up.sh gives each ``BRIDGEBENCH_SLURM_MARK=<state>``)."""
    mark = f"BRIDGEBENCH_SLURM_MARK={state}".encode()
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            comm = (proc / "comm").read_text().strip()
            if comm in DAEMONS and mark in (proc / "environ").read_bytes().split(b"\0"):
                if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX":
                    out.append(f"{comm} {proc.name}")
        except OSError:
            continue
    return out


def _sshd(config: Path) -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "comm").read_text().strip() == "sshd":
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if f"-f {config} " in cmd and "[listener]" in cmd:
                    out.append(proc.name)
        except OSError:
            continue
    return out


def _run(script: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=timeout)


@dataclass
class Odd:
    """The cluster below a 0700 and a 1777 folder, and what its first, failed start did."""

    env: dict[str, str]
    private: Path
    shared: Path
    failed_start: subprocess.CompletedProcess
    left_after_failure: list[str]


@pytest.fixture(scope="module")
def odd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Odd]:
    missing = [cmd for cmd in REQUIRED if shutil.which(cmd) is None]
    if missing:
        pytest.skip(f"local SLURM cluster not installed ({', '.join(missing)} missing): `make cluster-install` as root")
    base = tmp_path_factory.mktemp("anyfolder")
    private = base / "home"  # a private home folder, as root's is
    private.mkdir()
    private.chmod(0o700)
    shared = private / "tmp"  # a world-writable sticky folder, as /tmp is
    shared.mkdir()
    shared.chmod(0o1777)
    port = int(os.environ.get("BRIDGEBENCH_SLURM_PORT_BASE", "16817")) + 10
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "BRIDGEBENCH_REMOTE_"))}
    env.pop("BRIDGEBENCH_SLURM_RUN_DIR", None)
    env |= {
        "BRIDGEBENCH_SLURM_STATE": str(shared / "slurm"),
        "BRIDGEBENCH_SLURM_PORT_BASE": str(port),
        "BRIDGEBENCH_REMOTE_ROOT": str(shared / "remote"),
        "BRIDGEBENCH_REMOTE_SSH_PORT": str(port + 5),
    }
    state = shared / "slurm"
    # First start with slurmctld's port taken: up.sh fails after munged, MariaDB and slurmdbd are up; it stops them.
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        failed = _run(UP, env)
    left = _marked(state)
    up = _run(UP, env)
    if up.returncode:
        _run(DOWN, env)
        pytest.fail(
            f"launch/cluster/up.sh from a 0700 + 1777 folder failed ({up.returncode}):\n{up.stdout}\n{up.stderr}"
        )
    try:
        yield Odd(env, private, shared, failed, left)
    finally:
        subprocess.run([str(REMOTE_DOWN), "--purge"], env=env, capture_output=True, timeout=120)
        subprocess.run([str(DOWN), "--purge"], env=env, capture_output=True, timeout=300)


def test_a_failed_cluster_start_leaves_no_daemon_and_says_why(odd: Odd) -> None:
    res = odd.failed_start
    assert res.returncode != 0
    assert f"port {odd.env['BRIDGEBENCH_SLURM_PORT_BASE']} (for slurmctld) is already in use" in res.stderr, res.stderr
    assert "stopping what this run started (munged mariadbd slurmdbd)" in res.stderr, res.stderr
    assert odd.left_after_failure == [], odd.left_after_failure


def test_the_cluster_runs_with_its_state_below_private_and_sticky_folders(odd: Odd) -> None:
    state = Path(odd.env["BRIDGEBENCH_SLURM_STATE"])
    assert sorted(n.split()[0] for n in _marked(state)) == sorted(DAEMONS)
    conf = (state / "etc" / "slurm.conf").read_text()
    (socket_line,) = [line for line in conf.splitlines() if line.startswith("AuthInfo=socket=")]
    sock = Path(socket_line.split("=", 2)[2])
    assert not sock.is_relative_to(odd.private) and sock.is_socket(), sock  # munged's socket: outside the 0700 folder
    env = {**odd.env, "SLURM_CONF": str(state / "etc" / "slurm.conf")}
    job = subprocess.run(
        ["srun", "-A", "bridgebench", "-p", "local", "-N", "1", "-n", "1", "echo", "ok"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=odd.shared,
    )
    assert job.returncode == 0 and job.stdout == "ok\n", job.stderr


def test_unusable_runtime_folders_are_refused_with_the_rule_and_the_fix(odd: Odd) -> None:
    # munged: a socket folder below a 0700 folder
    env = {**odd.env, "BRIDGEBENCH_SLURM_RUN_DIR": str(odd.private / "sockets")}
    env["BRIDGEBENCH_SLURM_STATE"] = str(odd.shared / "slurm-refused")
    env["BRIDGEBENCH_SLURM_PORT_BASE"] = str(int(odd.env["BRIDGEBENCH_SLURM_PORT_BASE"]) + 20)
    res = _run(UP, env, timeout=60)
    err = " ".join(res.stderr.split())
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{odd.private} is mode 700: munged needs every folder above its socket executable by all" in err, err
    assert "Fix: set BRIDGEBENCH_SLURM_RUN_DIR" in err and _marked(odd.shared / "slurm-refused") == []
    # sshd: authorized_keys below a world-writable sticky folder (StrictModes)
    env = {**odd.env, "BRIDGEBENCH_REMOTE_RUN_DIR": str(odd.shared / "keys")}
    res = _run(REMOTE_UP, env, timeout=60)
    err = " ".join(res.stderr.split())
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{odd.shared} is mode 1777: sshd (StrictModes) refuses keys under a folder group or others" in err, err
    assert "Fix: set BRIDGEBENCH_REMOTE_RUN_DIR" in err


def test_the_login_node_runs_with_its_root_below_private_and_sticky_folders(odd: Odd) -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None or not Path("/usr/sbin/sshd").exists():
        pytest.skip("the emulated login node needs root, sshd and bubblewrap (`make cluster-install` as root)")
    config = Path(odd.env["BRIDGEBENCH_REMOTE_ROOT"]) / "ssh" / "sshd_config"
    # sshd starts, then refuses the login (a user without the key): up.sh says what sshd said and stops that sshd,
    # and leaves the SLURM cluster it did not start running
    res = _run(REMOTE_UP, {**odd.env, "BRIDGEBENCH_REMOTE_USER": "nobody"}, timeout=120)
    assert res.returncode == 1 and "started sshd" in res.stdout, res.stdout + res.stderr
    err = " ".join(res.stderr.split())
    assert "cannot log in to the emulated login node" in err and "sshd says: Could not open user 'nobody'" in err, err
    assert "stopping the sshd this run started" in err and _sshd(config) == [], err
    assert len(_marked(Path(odd.env["BRIDGEBENCH_SLURM_STATE"]))) == len(DAEMONS)
    res = _run(REMOTE_UP, odd.env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"ssh root@127.0.0.1:{odd.env['BRIDGEBENCH_REMOTE_SSH_PORT']} works" in res.stdout  # key login + sinfo
    keys = [line.split(None, 1)[1] for line in config.read_text().splitlines() if line.startswith("AuthorizedKeysFile")]
    assert not Path(keys[0]).is_relative_to(odd.private), keys


def walkthrough() -> list[list[str]]:
    """The commands of README's walkthrough block (between ``<!-- walkthrough: begin -->`` and ``end``), in order,
    comments dropped."""
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- walkthrough: begin -->", 1)[1].split("<!-- walkthrough: end -->", 1)[0]
    lines = [line for line in block.splitlines() if line.strip() and not line.startswith("```")]
    return [shlex.split(line, comments=True) for line in lines]


def test_readme_walkthrough(odd: Odd, tmp_path: Path) -> None:
    """README's walkthrough, in order, as written -- scaled down (the small model, one repeat instead of 3) -- on the
    cluster below a 0700 and a 1777 folder, with only ``BRIDGEBENCH_SLURM_STATE`` naming it (no ``SLURM_CONF``).
    Issue 24: ``compare --source runs --a optimizer=adamw --b optimizer=muon`` could not work on the walkthrough's
    records (all Muon); ``submit`` ignored the state without ``SLURM_CONF``; statistics were unlabelled. Runs last in
    this module: its final ``make cluster-down`` stops the cluster."""
    if os.geteuid() != 0 or shutil.which("bwrap") is None or not Path("/usr/sbin/sshd").exists():
        pytest.skip("the walkthrough's login node needs root, sshd and bubblewrap (`make cluster-install` as root)")
    env = {k: v for k, v in odd.env.items() if k != "SLURM_CONF"}
    env |= {
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
        "BRIDGEBENCH_TABLES": str(tmp_path / "tables"),
        "BRIDGEBENCH_SITE": str(tmp_path / "site"),
        "COLUMNS": "250",
    }
    steps = walkthrough()
    assert [c[:2] for c in steps if c[0] == "make"] == [
        ["make", "cluster-up"],
        ["make", "remote-up"],
        ["make", "cluster-down"],
    ]
    out: dict[str, str] = {}
    for cmd in steps:
        if cmd[0] == "make":
            argv = ["make", "--no-print-directory", "-C", str(REPO), *cmd[1:]]
        else:
            assert cmd[0] == "bridgebench", cmd
            args = cmd[1:]
            if args[0] == "submit":  # scaled down: the small model, one repeat
                args = [a for a in args if a not in ("--repeats", "3")] + SMALL[1:]
            argv = [*BB, *args]
        res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert res.returncode == 0, (
            f"{shlex.join(cmd)} failed ({res.returncode}):\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
        )
        out[" ".join(cmd[:3])] = res.stdout + res.stderr
    assert "submit: 2 runs: 2 COMPLETED" in out["bridgebench submit -m"], out["bridgebench submit -m"]
    report = out["bridgebench report"]
    assert "median [IQR] over repeats" in report and "2 optimizer-step records" in report, report
    compare = out["bridgebench compare --source"]
    assert "A: optimizer=adamw  (1 runs" in compare and "B: optimizer=muon  (1 runs" in compare, compare
    assert "A (mean of run medians)" in compare and "B (mean of run medians)" in compare, compare
    assert "submit: 1 run: 1 COMPLETED" in out["bridgebench submit experiment=optstep_local"]
    ident = (Path(odd.env["BRIDGEBENCH_SLURM_STATE"]) / "cluster-id").read_text().strip()
    rows = json.loads(
        subprocess.run([*BB, "status", "--json"], env=env, capture_output=True, text=True, timeout=120).stdout
    )
    assert len(rows) == 3 and {r["state"] for r in rows} == {"COMPLETED"}, rows
    # issue 26: the site built after the walkthrough shows its records on "Your runs" (3 completed optimizer-step runs)
    runs_page = (tmp_path / "site" / "runs.html").read_text()
    records = sorted((tmp_path / "runs").rglob("*.json"))
    assert "No records in the results store" not in runs_page
    assert sum(1 for p in records if json.loads(p.read_text()).get("record_id", "") in runs_page) >= 3, records
    assert {r["cluster_id"] for r in rows} == {f"local-{ident}", f"local_remote-{ident}"}, rows
    assert _marked(Path(odd.env["BRIDGEBENCH_SLURM_STATE"])) == []  # make cluster-down stopped it
