"""No credential leaves bridgebench (issue 17, breaks 2-4): for every way a secret can come in -- a bad override whose
error echoes the value, an env var with a credential-like name (fragments, camelCase), a URL with a password, a
resolver that reads the environment -- the value is in no output line and in no file bridgebench wrote.

Each case runs the real CLI (``python -m bridgebench.cli``) in a fresh folder with every ``BRIDGEBENCH_*`` path under
it; "written" is every file under that folder afterwards. Values are made up (right prefix and length).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BB = [sys.executable, "-m", "bridgebench.cli"]
GHP = "ghp_" + "Zq8xWv3NpL5tRk2YhJ7mCb4FgD9sAe6UiO1P"
HF = "hf_" + "PlMoKnIjBhUvGyTfCrDxEsZwAqPlMoKnIj"
PLAIN = "plain-Secret-Value-7c1e"  # not token-shaped: only the name (or the resolver) says it is secret


def run_cli(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {
        **os.environ,
        **{f"BRIDGEBENCH_{k}": str(tmp_path / k.lower()) for k in ("JOB_DIR", "PLANS", "LEDGER", "RESULTS")},
        "BRIDGEBENCH_DEBUG_LOG": str(tmp_path / "debug.log"),  # the debug log is a file bridgebench writes too
        **(env or {}),
    }
    return subprocess.run([*BB, *args], capture_output=True, text=True, env=full, cwd=tmp_path, timeout=600)


def assert_nowhere(tmp_path: Path, res: subprocess.CompletedProcess, value: str) -> None:
    assert value not in res.stdout and value not in res.stderr, (res.stdout + res.stderr)[-2000:]
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and value.encode() in p.read_bytes()]
    assert not leaked, leaked


@pytest.mark.parametrize(
    "override,value,says",
    [
        (f"model.seq_length={GHP}", GHP, "could not be converted"),  # OmegaConf's type error echoes the value
        (f"env_vars.GH={GHP}", GHP, "add one with a leading +"),  # the unknown-key error echoes the override
        (f"env_vars.HF_TOKEN={PLAIN}", PLAIN, "add one with a leading +"),  # the name alone marks it
        (f"+env_vars.HF_TOKEN={PLAIN}", PLAIN, "secret_in_config"),
        (f"+env_vars.RUN_NOTE={HF}", HF, "secret_in_config"),  # a token under an innocent name
    ],
)
def test_bad_overrides_never_echo_the_value(tmp_path, override, value, says):
    res = run_cli(tmp_path, "plan", "experiment=optstep_local", override, "--out", "plan")
    assert res.returncode == 2 and says in res.stderr and "<redacted>" in res.stderr, res.stderr[-2000:]
    assert_nowhere(tmp_path, res, value)


@pytest.mark.parametrize(
    "name", ["HFTOKEN", "hfToken", "WANDB_AUTH", "GITHUB_PAT", "PASSWD", "db-password", "myApiKey"]
)
def test_credential_names_with_fragments_are_refused(tmp_path, name):
    res = run_cli(tmp_path, "plan", "experiment=optstep_local", f"+env_vars.{name}={PLAIN}", "--out", "plan")
    assert res.returncode == 2 and f"secret_in_config: env_vars.{name}:" in res.stderr, res.stderr[-2000:]
    assert not (tmp_path / "plan").exists()
    assert_nowhere(tmp_path, res, PLAIN)


def test_url_with_a_password_is_refused(tmp_path):
    url = f"postgresql://bench:{PLAIN}@db.example.com:5432/runs"
    res = run_cli(tmp_path, "plan", "experiment=optstep_local", f"+env_vars.DB_URL={url}", "--out", "plan")
    assert res.returncode == 2 and "URL with a password" in res.stderr, res.stderr[-2000:]
    assert_nowhere(tmp_path, res, PLAIN)


def test_env_resolver_value_is_passed_by_name(tmp_path):
    """The issue's `'+env_vars.DBCONN=${oc.env:MYDBPASS}'`: the plan is written, its config.yaml says
    `${oc.env:MYDBPASS}`, the payload reads $MYDBPASS on the node, and the value is nowhere."""
    res = run_cli(
        tmp_path, "plan", "experiment=optstep_local", "+env_vars.DBCONN=${oc.env:MYDBPASS}", "--out", "plan",
        env={"MYDBPASS": PLAIN},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    (run,) = [p for p in (tmp_path / "plan").iterdir() if p.is_dir()]
    assert "DBCONN: ${oc.env:MYDBPASS}" in (run / "config.yaml").read_text()
    assert 'DBCONN="${MYDBPASS?' in (run / "payload.sh").read_text()
    assert "DBCONN" not in (run / "submit.sh").read_text()  # set -x would print an export's value into the job log
    assert_nowhere(tmp_path, res, PLAIN)


@pytest.mark.parametrize(
    "override",
    [
        "+env_vars.DBCONN=postgres://u@h/${oc.env:MYDBPASS}",  # part of a value: cannot be passed by name
        "model.name=${oc.env:MYDBPASS}",
        "model.seq_length=${oc.env:MYDBPASS}",  # would echo the value in OmegaConf's type error
        "+env_vars.X='${oc.decode:${oc.env:MYDBPASS}}'",
        "cluster.client_env.SLURM_CONF=${oc.env:MYDBPASS}",
    ],
)
def test_other_env_and_file_reads_are_refused(tmp_path, override):
    res = run_cli(tmp_path, "plan", "experiment=optstep_local", override, "--out", "plan", env={"MYDBPASS": PLAIN})
    assert res.returncode == 2 and "env_resolver" in res.stderr, res.stderr[-2000:]
    assert not (tmp_path / "plan").exists()
    assert_nowhere(tmp_path, res, PLAIN)


def test_a_secret_from_the_environment_is_scrubbed_from_any_message(tmp_path):
    """HF_TOKEN exported in the shell and read into a bad place by an override: whatever message comes back (here
    the refusal), the value is not in it -- the CLI scrubs the values of credential-named variables."""
    res = run_cli(tmp_path, "plan", "experiment=optstep_local", "+env_vars.X=${oc.env:HF_TOKEN}x", env={"HF_TOKEN": HF})
    assert res.returncode == 2
    assert_nowhere(tmp_path, res, HF)


def test_a_sweep_with_a_refused_secret_writes_it_nowhere(tmp_path):
    """plan -m: the run with the secret is refused and listed, the others planned; plan.json lists the refused run
    with its value redacted."""
    sweep = f"env_vars.OMP_NUM_THREADS=1,{GHP}"
    res = run_cli(tmp_path, "plan", "-m", "experiment=optstep_local", sweep, "--out", "plan")
    assert res.returncode == 0 and (tmp_path / "plan" / "plan.json").exists(), res.stderr[-2000:]
    assert "secret_in_config" in res.stderr
    assert_nowhere(tmp_path, res, GHP)


def test_the_redaction_step():
    from bridgebench.cli.redaction import known_secrets
    from bridgebench.config.secrets import redact

    known = known_secrets(["model.x=1", f"+env_vars.HF_TOKEN={PLAIN}", f"a.b={GHP}"], {"WANDB_API_KEY": "k" * 12})
    assert known >= {PLAIN, GHP, "k" * 12} and "1" not in known
    text = f"Value '{PLAIN}' x=1 url https://u:{PLAIN}@h/p HF_TOKEN={PLAIN} {GHP} {'k' * 12}"
    out = redact(text, known)
    assert PLAIN not in out and GHP not in out and "k" * 12 not in out and "x=1" in out
    assert redact("secret_in_config: env_vars.HF_TOKEN: the name looks like") == (
        "secret_in_config: env_vars.HF_TOKEN: the name looks like"
    )  # a refusal naming the key stays readable


def test_the_debug_log_is_scrubbed(tmp_path):
    """Third-party output and tracebacks go to the debug log (bridgebench.debuglog); the CLI configures it with the
    same scrubber as its stdout/stderr, so a secret that reaches a log record does not reach the file."""
    import logging

    from bridgebench import debuglog
    from bridgebench.cli.redaction import scrub

    log = tmp_path / "debug.log"
    try:
        debuglog.configure(path=log, scrub=scrub)
        logging.getLogger("some.library").warning("connecting with token %s to https://u:%s@host/x", GHP, PLAIN)
        with debuglog.captured():
            print(f"HF_TOKEN={HF}")
    finally:
        for h in logging.getLogger().handlers:
            h.flush()
    text = log.read_text()
    assert "connecting with token" in text and "<redacted>" in text
    assert GHP not in text and PLAIN not in text and HF not in text
