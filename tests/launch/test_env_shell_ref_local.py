"""A literal ``${SLURM_JOB_ID}`` in an env value reaches the job's shell, which expands it (issue 24, "Crashes
instead of answers": it used to end ``plan``/``submit`` in an OmegaConf InterpolationKeyError), on the real local
cluster; the rest of the value stays literal, and a reference to a credential-named variable is refused
(``secret_in_config``: the sbatch script runs with ``set -x``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bridgebench.launch.shellsafe import shell_word
from tests.launch.test_e2e_local import SMALL, bb  # noqa: F401  (fixture)
from tests.launch.test_local_cluster import slurm_cluster  # noqa: F401  (fixture)

FAULTS = Path(__file__).with_name("faults.py")


def test_shell_word_expands_only_upper_case_references():
    word = shell_word("run-${SLURM_JOB_ID}/x $HOME ${lower} $(touch p) `x` ';")
    out = subprocess.run(["bash", "-c", f"SLURM_JOB_ID=77; printf %s {word}"], capture_output=True, text=True)
    assert out.stdout == "run-77/x $HOME ${lower} $(touch p) `x` ';"


@pytest.mark.slurm
def test_slurm_job_id_in_an_env_value_is_expanded_by_the_job(bb):  # noqa: F811
    wrapper = [sys.executable, str(FAULTS), "env_print", "RUN_TAG"]
    res = bb("submit", *SMALL, "+env_vars.RUN_TAG=run-${SLURM_JOB_ID}/x $HOME", f"job.wrapper={json.dumps(wrapper)}",
             "--wait", "--timeout", "300", "--json", check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (a,) = json.loads(res.stdout)
    logs = "".join(p.read_text(errors="replace") for p in Path(a["job_dir"]).rglob("*.out"))
    assert f"faults.py: RUN_TAG=run-{a['slurm_job_id']}/x $HOME" in logs, logs[-2000:]
    refused = bb("plan", *SMALL, "+env_vars.X=pre-${DB_PASSWORD}", check=False)
    assert refused.returncode == 2 and "secret_in_config" in refused.stderr and "DB_PASSWORD" in refused.stderr
