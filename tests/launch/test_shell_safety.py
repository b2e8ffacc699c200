"""No shell built from strings: paths and values with spaces, quotes, ``;``, ``$()``, backticks and newlines either work
(handled by Python or quoted) or are refused up front with a message naming the value and the fix. Every injection
points at a marker file; no test may create it. nemo-run's own unquoted commands (launch/nemorun.py) are kept away
from user-chosen paths. The same values on the real cluster: tests/launch/test_faults_local.py."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridgebench.paths import REPO_ROOT
from tests.launch.ssh_printer import rsync_ssh_words

BB = [sys.executable, "-m", "bridgebench.cli"]
NASTY = ["a b", "it's", 'say "hi"', "x;touch {m};#", "$(touch {m})", "`touch {m}`", "new\nline", "tab\tand&amp|pipe"]


def hydra_quoted(value: str) -> str:
    """``value`` as a Hydra single-quoted string (backslashes and single quotes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def run(tmp_path, *args, env=None, cwd=None):
    full_env = {
        **os.environ,
        "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
        **(env or {}),
    }
    return subprocess.run([*BB, *args], capture_output=True, text=True, env=full_env, cwd=cwd or tmp_path, timeout=600)


def no_marker(tmp_path: Path, marker: Path) -> None:
    made = [p for p in tmp_path.rglob("PWNED*") if p.is_file()]  # folders may carry the name: they are the paths
    assert not marker.exists() and not made and not (REPO_ROOT / "PWNED").exists(), made


@pytest.fixture()
def paths_env(tmp_path, monkeypatch):
    monkeypatch.setenv("BRIDGEBENCH_JOB_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("BRIDGEBENCH_PLANS", str(tmp_path / "plans"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("name", NASTY)
def test_plan_out_with_shell_characters_works_and_runs_nothing(tmp_path, paths_env, name):
    from bridgebench.launch.plan import plan

    marker = tmp_path / "PWNED"
    out = tmp_path / "o" / name.format(m=marker) / "plan"
    final, runs = plan(["experiment=optstep_local"], out)
    assert final == out and len(runs) == 1
    run_dir = Path(runs[0].dir)
    assert {p.name for p in run_dir.iterdir()} >= {"config.yaml", "submit.sh", "payload.sh", "run.json"}
    payload = (run_dir / "payload.sh").read_text()
    # the plan folder never reaches the job (launch/nodepaths.py: its config travels in the job folder)
    assert str(out) not in payload and "/configs/config.yaml" in payload
    assert not list(out.parent.glob(".plan-*"))  # no staging leftovers
    no_marker(tmp_path, marker)


def test_plan_command_with_an_injected_out(tmp_path):
    """The issue's reproduction through the CLI: exit 0, the plan where asked, no marker file."""
    marker = tmp_path / "PWNED"
    out = tmp_path / "OUT" / f"q;touch {marker};#" / "plan"
    res = run(tmp_path, "plan", "experiment=optstep_local", "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "plan.json").exists()
    no_marker(tmp_path, marker)


def test_a_plan_folder_that_cannot_be_made_is_a_clear_error_leaving_nothing(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    res = run(tmp_path, "plan", "experiment=optstep_local", "--out", str(tmp_path / "afile" / "a b" / "plan"))
    assert res.returncode == 2 and "Traceback" not in res.stderr and "afile" in res.stderr, res.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize(
    "override,message",
    [
        ("model.name='x;touch {m}'", "model.name"),
        ("model.name='a b'", "model.name"),
        ("cluster.container_mounts=['/a;touch {m}:/b']", "cluster.container_mounts[0]"),
        ("cluster.container_mounts=['/a b:/b']", "cluster.container_mounts[0]"),
        ("cluster.container_mounts=['/$(touch {m}):/b']", "cluster.container_mounts[0]"),
        ("cluster.account='acct;touch {m}'", "cluster.account"),
        ("cluster.partition='p q'", "cluster.partition"),
    ],
)
def test_names_and_mounts_with_shell_characters_are_refused(tmp_path, paths_env, override, message):
    from bridgebench.launch.plan import PlanError, plan

    marker = tmp_path / "PWNED"
    with pytest.raises(PlanError) as err:
        plan(["experiment=optstep_local", override.format(m=marker)], tmp_path / "p")
    assert message in str(err.value) and "shell_safe_value" in str(err.value)
    assert not (tmp_path / "p").exists()
    no_marker(tmp_path, marker)


def test_refusal_through_the_cli_is_an_error_not_a_traceback(tmp_path):
    res = run(tmp_path, "plan", "experiment=optstep_local", "cluster.container_mounts=['/a;b:/c']", "--out", "p")
    assert res.returncode == 2 and "cluster.container_mounts[0]" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "p").exists()


def test_env_values_reach_the_script_quoted(tmp_path, paths_env):
    """Every nasty value at once, exported by the sbatch script and read back by a real bash: identical, nothing
    run."""
    marker = tmp_path / "PWNED"
    values = {f"NOTE{i}": v.format(m=marker) for i, v in enumerate(NASTY)}
    overrides = [f"+env_vars.{k}={hydra_quoted(v)}" for k, v in values.items()]
    from bridgebench.launch.plan import plan

    plan(["experiment=optstep_local", *overrides], tmp_path / "p")
    script = next((tmp_path / "p").glob("*/submit.sh")).read_text()
    start = script.index("export NOTE0=")
    exports = script[start : script.index("\n# Command 1")]
    for key, value in values.items():
        got = subprocess.run(
            ["bash", "-c", exports + f'\nprintf %s "${key}"'], capture_output=True, text=True, cwd=tmp_path
        )
        assert got.returncode == 0 and got.stdout == value, (key, got.stdout, got.stderr)
    no_marker(tmp_path, marker)


@pytest.mark.parametrize("job_dir", ["jobs with space", "jobs;touch {m}", "jobs$(touch {m})", "jobs\nnewline"])
def test_a_job_folder_nemo_run_cannot_quote_is_refused_before_the_build(tmp_path, job_dir):
    """nemo-run 0.11.1 formats the job folder into `mkdir -p`, `sbatch` and #SBATCH lines unquoted: such a folder
    is refused, naming the variable that moves it, before the Megatron-Bridge build (megatron never imported)."""
    marker = tmp_path / "PWNED"
    bad = str(tmp_path / job_dir.format(m=marker))
    code = (
        "import sys\n"
        "from bridgebench.launch.plan import plan, PlanError\n"
        "try:\n    plan(['recipe=qwen3_30b_a3b_gb300_mxfp8'], sys.argv[1])\n"
        "except PlanError as err:\n"
        "    print('BRIDGEBENCH_JOB_DIR' in str(err), any(m.startswith('megatron') for m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "p")],
        capture_output=True,
        text=True,
        env={**os.environ, "BRIDGEBENCH_JOB_DIR": bad},
    )
    assert out.stdout.split() == ["True", "False"], out.stdout + out.stderr[-2000:]
    assert not (tmp_path / "p").exists() and not Path(bad).exists()
    no_marker(tmp_path, marker)


def test_checkout_path_with_a_space(tmp_path):
    """A checkout under a folder with a space: the default job folder (inside the checkout) is refused with the
    fix; with BRIDGEBENCH_JOB_DIR moved, planning works and the payload's `cd` into the checkout is quoted."""
    checkout = tmp_path / "my checkout; $(touch PWNED)" / "bridgebench"
    checkout.mkdir(parents=True)
    for part in ("src", "configs", "recipes"):
        shutil.copytree(REPO_ROOT / part, checkout / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    for key in ("BRIDGEBENCH_JOB_DIR", "BRIDGEBENCH_PLANS"):
        env.pop(key, None)
    refused = subprocess.run(
        [*BB, "plan", "experiment=optstep_local", "--out", str(tmp_path / "p1")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert refused.returncode == 2 and "BRIDGEBENCH_JOB_DIR" in refused.stderr, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr and not (tmp_path / "p1").exists()
    env["BRIDGEBENCH_JOB_DIR"] = str(tmp_path / "jobs")
    ok = subprocess.run(
        [*BB, "plan", "experiment=optstep_local", "--out", str(tmp_path / "p2")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stderr[-2000:]
    payload = next((tmp_path / "p2").glob("*/payload.sh")).read_text()
    assert f"cd {shlex.quote(str(checkout))} &&" in payload
    no_marker(tmp_path, tmp_path / "PWNED")


@pytest.mark.parametrize("wrapper", ["[true]", "[numactl,1]", "[1.5]"])
def test_job_wrapper_must_be_a_list_of_strings(tmp_path, wrapper):
    """Issue 17: `job.wrapper=[true]` was accepted and ran `True`; now refused, naming the item and the rule."""
    res = run(tmp_path, "plan", "experiment=optstep_local", f"job.wrapper={wrapper}", "--out", "p")
    assert res.returncode == 2 and "shell_safe_value" in res.stderr and "job.wrapper[" in res.stderr, res.stderr
    assert "not a string" in res.stderr and not (tmp_path / "p").exists()


def test_job_wrapper_of_strings_reaches_the_payload_quoted(tmp_path):
    res = run(
        tmp_path, "plan", "experiment=optstep_local", "job.wrapper=[numactl,'--cpunodebind=0','a b']", "--out", "p"
    )
    assert res.returncode == 0, res.stderr[-2000:]
    payload = next((tmp_path / "p").glob("*/payload.sh")).read_text()
    assert "numactl --cpunodebind=0 'a b' " in payload


def test_the_issue_command_refuses_naming_the_rule(tmp_path):
    """Done-when of issue 17: `bridgebench plan experiment=optstep_local cluster=example_nvl72
    "release.container_image='nvcr.io/x;touch P;#'"` refuses naming the rule (and the field); nothing is written."""
    res = run(
        tmp_path,
        "plan",
        "experiment=optstep_local",
        "cluster=example_nvl72",
        "release.container_image='nvcr.io/x;touch P;#'",
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "shell_safe_value" in res.stderr and "release.container_image" in res.stderr
    assert not (tmp_path / "P").exists() and not (tmp_path / "plans").exists()


# --------------------------------------------------------------------------------------------------------------------
# issue 24: the ssh tunnel's fields reach the submitting machine's ssh / rsync command lines
# --------------------------------------------------------------------------------------------------------------------

SSH_PLAN = ["experiment=optstep_local", "cluster=example_nvl72"]


@pytest.mark.parametrize(
    "field,value",
    [
        ("identity", "/tmp/k' ; /usr/bin/touch {m} ; '"),  # the issue's: closed nemo-run's --rsh='ssh -i ...' quote
        ("identity", "/tmp/k $(touch {m})"),
        ("known_hosts", "/tmp/kh';touch {m};'"),
        ("host", "login.example.com;touch {m}"),
        ("host", "-oProxyCommand=touch {m}"),
        ("user", "me';touch {m};'"),
        ("job_dir", "/lustre/x';touch {m};'"),
    ],
)
def test_plan_refuses_unsafe_tunnel_fields_naming_the_field(tmp_path, field, value):
    marker = tmp_path / "PWNED"
    res = run(tmp_path, "plan", *SSH_PLAN, f"cluster.tunnel.{field}={hydra_quoted(value.format(m=marker))}")
    assert res.returncode == 2, res.stderr[-2000:]
    assert "shell_safe_value" in res.stderr and f"cluster.tunnel.{field}" in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and not (tmp_path / "plans").exists()
    no_marker(tmp_path, marker)


def test_plan_refuses_a_port_out_of_range(tmp_path):
    res = run(tmp_path, "plan", *SSH_PLAN, "cluster.tunnel.port=70000")
    assert res.returncode == 2 and "cluster.tunnel.port" in res.stderr and "1-65535" in res.stderr, res.stderr


@pytest.mark.parametrize("name", ["_", "PWD", "OLDPWD", "SHLVL", "IFS", "PS4", "BASH_ENV", "ENV", "CDPATH"])
def test_env_names_the_shell_owns_are_refused_by_name(tmp_path, paths_env, name):
    from bridgebench.launch.plan import PlanError, plan

    with pytest.raises(PlanError) as err:
        plan(["experiment=optstep_local", f"+env_vars.{name}=x"], tmp_path / "p")
    assert "shell_safe_value" in str(err.value) and f"env_vars.{name}" in str(err.value)
    assert "the shell owns" in str(err.value)


def test_the_job_folder_copy_is_an_argv_rsync_with_batch_ssh_and_strict_host_keys(tmp_path):
    """What replaced nemo-run's ``rsync --rsh='ssh -i <identity> -p <port>'`` shell string: real rsync, its ssh
    replaced by an argv printer, gets exactly the intended words (batch mode, the cluster's known_hosts, that key)."""
    from omegaconf import OmegaConf

    from bridgebench.launch.tunnel import rsync_argv, ssh_tunnel

    src = tmp_path / "exp dir-is-refused"
    cluster = OmegaConf.create(
        {"tunnel": {"type": "ssh", "host": "login.example.com", "user": "me", "port": 2222,
                    "identity": str(tmp_path / "id_ed25519"), "known_hosts": str(tmp_path / "kh"),
                    "job_dir": "/lustre/jobs"}}
    )  # fmt: skip
    tunnel = ssh_tunnel(cluster, "/lustre/jobs/run/a1")
    from bridgebench.launch.shellsafe import ShellValueError

    with pytest.raises(ShellValueError):  # a local folder nemo-run would not quote either
        rsync_argv(tunnel, str(src), "/lustre/jobs/run")
    src = tmp_path / "exp"
    src.mkdir()
    argv = rsync_argv(tunnel, str(src), "/lustre/jobs/run")
    assert argv[0] == "rsync" and "--rsh" in argv
    words = rsync_ssh_words(tmp_path, argv)
    assert words[: words.index("-l")] == [
        "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={tmp_path / 'kh'}",
        "-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "IdentitiesOnly=yes",
        "-i", str(tmp_path / "id_ed25519"), "-p", "2222",
    ]  # fmt: skip
    assert words[words.index("-l") : words.index("-l") + 3] == ["-l", "me", "login.example.com"]
    assert words[-1] == "/lustre/jobs/run"


def test_nemo_runs_shell_string_rsync_is_replaced_while_submitting():
    from nemo_run.run import experiment

    from bridgebench.launch import tunnel as tun

    original = experiment.rsync
    with tun.own_rsync(object()):
        assert experiment.rsync is not original and experiment.rsync.__module__ == tun.__name__
    assert experiment.rsync is original
