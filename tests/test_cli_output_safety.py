"""Output never crashes on data (issue 24, "Crashes instead of answers"): user values are never read as rich markup
(``container_mounts=[/lustre:/lustre]`` used to end ``plan`` in a MarkupError; a ledger reason holding ``[/...]``),
and ``compare --out`` onto an existing file is refused with a rule, writing nothing. Real CLI subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bridgebench.launch.ledger import Attempt, Ledger

BB = [sys.executable, "-m", "bridgebench.cli"]


def bb(tmp_path, *args):
    env = {
        **os.environ,
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_TABLES": str(tmp_path / "tables"),
    }
    return subprocess.run([*BB, *args], capture_output=True, text=True, env=env, timeout=600)


def test_a_container_mount_is_printed_not_read_as_markup(tmp_path):
    res = bb(tmp_path, "plan", "experiment=optstep_local", "cluster.container_mounts=[/lustre:/lustre]")
    assert res.returncode == 0 and "MarkupError" not in res.stderr, res.stderr[-2000:]
    (cfg,) = (tmp_path / "plans").rglob("config.yaml")  # the progress line that named it used to raise
    assert "/lustre:/lustre" in cfg.read_text()


def test_a_reason_with_brackets_is_shown_as_written(tmp_path):
    now = time.time()
    Ledger(tmp_path / "ledger.sqlite").add(
        Attempt(run_id="abc-r0", attempt=0, name="run [/lustre:/lustre]", job_type="optstep", state="FAILED",
                submitted_at=now, updated_at=now, reason="failed: [/bold] [red]x[/red] /lustre:/lustre]")
    )  # fmt: skip
    res = bb(tmp_path, "status")
    assert res.returncode == 0 and "MarkupError" not in res.stderr, res.stderr[-2000:]
    assert "[/bold] [red]x[/red]" in res.stdout and "run [/lustre:/lustre]" in res.stdout


def test_compare_out_onto_a_file_is_refused(tmp_path):
    target = tmp_path / "results.csv"
    target.write_text("keep me\n")
    res = bb(tmp_path, "compare", "--source", "published", "model=kimi_k2", "--out", str(target), "--no-plots")
    assert res.returncode == 2 and "out_is_folder" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert target.read_text() == "keep me\n"


def test_plan_out_onto_a_file_is_refused(tmp_path):
    target = tmp_path / "plan.txt"
    target.write_text("keep me\n")
    res = bb(tmp_path, "plan", "experiment=optstep_local", "--out", str(target))
    assert res.returncode == 2 and "out_is_folder" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert target.read_text() == "keep me\n"
