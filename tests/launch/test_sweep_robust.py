"""A sweep never crashes on its data or its disk (issue 24, "No bounds" and "Crashes instead of answers"): a space
over the stated cap is refused before anything is built (rule ``sweep_space_cap``), ``--resume`` after a corrupt
stage file redoes that stage (and the ones made from it), and a full disk is an error naming the file with nothing
half-written, after which ``--resume`` finishes the sweep. Real CLI subprocesses; the full disk is a real per-file
limit (RLIMIT_FSIZE: the kernel's EFBIG, as a full quota or filesystem gives ENOSPC)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BB = [sys.executable, "-m", "bridgebench.cli"]
SPACE = ["model=qwen3_30b_a3b", "gpu=h100", "num_gpus=8", "model.tensor_model_parallel_size=1,2",
         "train.micro_batch_size=1,2", "--top-k", "0", "--name", "s"]  # fmt: skip


@pytest.fixture()
def env(tmp_path):
    return {**os.environ, "BRIDGEBENCH_SWEEPS": str(tmp_path / "sweeps"), "BRIDGEBENCH_PLANS": str(tmp_path / "p")}


def bb(env, *args, fsize: int | None = None):
    pre = []
    if fsize is not None:  # this process may write no file beyond fsize bytes
        code = (
            "import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({fsize}, {fsize})); "
            "from bridgebench.cli import entry; sys.argv[0] = 'bridgebench'; entry()"
        )
        cmd = [sys.executable, "-c", code, *args]
    else:
        cmd = [*BB, *args]
    return subprocess.run(pre + cmd, capture_output=True, text=True, env=env, timeout=600)


def test_a_space_over_the_cap_is_refused_before_it_is_built(env, tmp_path):
    for axes in (
        ["train.micro_batch_size=range(1,1000000000001)"],  # one axis of 10^12 values
        [f"{k}=range(1,10001)" for k in ("train.micro_batch_size", "model.tensor_model_parallel_size",
                                          "model.context_parallel_size")],  # 10^12 points from three axes
    ):  # fmt: skip
        res = bb(env, "sweep", "model=qwen3_30b_a3b", *axes, "--name", "big")
        assert res.returncode == 2 and "sweep_space_cap" in res.stderr and "200,000" in res.stderr, res.stderr
        assert not (tmp_path / "sweeps" / "big").exists()


def test_resume_after_a_corrupt_stage_file_redoes_that_stage(env, tmp_path):
    first = json.loads(bb(env, "sweep", *SPACE, "--json").stdout)
    stage = tmp_path / "sweeps" / "s" / "stages" / "3-memory.parquet"
    stage.write_bytes(stage.read_bytes()[: stage.stat().st_size // 2])  # truncated, as a crash mid-copy leaves it
    res = bb(env, "sweep", *SPACE, "--resume", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "3-memory.parquet is corrupt" in res.stderr and "Traceback" not in res.stderr
    again = json.loads(res.stdout)
    resumed = {k: v["resumed"] for k, v in again["stages"].items()}
    assert resumed == {"enumerate": True, "rules": True, "memory": False, "time": False}, resumed
    assert again["counts"] == first["counts"]
    # a corrupt state.json is named, never a traceback
    (tmp_path / "sweeps" / "s" / "state.json").write_text("[]")
    res = bb(env, "sweep", *SPACE, "--resume")
    assert res.returncode == 2 and "sweep_state_corrupt" in res.stderr and "state.json" in res.stderr


def test_a_full_disk_during_a_sweep_names_the_file_and_leaves_nothing_half_written(env, tmp_path):
    # the same sweep with room, elsewhere: a file-size limit between the stage files 1-3 and 4-time.parquet makes
    # the disk fill at stage 4 (sizes measured, not assumed: the typed row's columns grow with the model)
    roomy = {**env, "BRIDGEBENCH_SWEEPS": str(tmp_path / "roomy"), "BRIDGEBENCH_PLANS": str(tmp_path / "roomy-p")}
    assert bb(roomy, "sweep", *SPACE).returncode == 0
    stages = tmp_path / "roomy" / "s" / "stages"
    first = max((stages / f).stat().st_size for f in ("1-enumerate.parquet", "2-rules.parquet", "3-memory.parquet"))
    last = (stages / "4-time.parquet").stat().st_size
    assert first < last, (first, last)
    fsize = (first + last) // 2
    res = bb(env, "sweep", *SPACE, "--json", fsize=fsize)  # the stage files 1-3 fit, 4-time.parquet does not
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "cannot write the sweep file" in res.stderr and "--resume" in res.stderr
    named = res.stderr.split("cannot write the sweep file ", 1)[1].split(":", 1)[0]
    folder = tmp_path / "sweeps" / "s"
    assert Path(named).parent in (folder, folder / "stages")
    assert not Path(named).exists() or Path(named).stat().st_size <= fsize
    leftovers = [p.name for p in folder.rglob(".*")]
    assert leftovers == [], leftovers  # no temporary file of the failed write is left
    state = json.loads((folder / "state.json").read_text())
    done = {k for k, v in state["stages"].items() if v.get("done")}
    assert done and "time" not in done  # the stage that could not be written is not marked done
    res = bb(env, "sweep", *SPACE, "--resume", "--json")  # room again: the sweep finishes, finished stages kept
    assert res.returncode == 0, res.stderr[-3000:]
    resumed = {k: v["resumed"] for k, v in json.loads(res.stdout)["stages"].items()}
    assert all(resumed[s] for s in done) and resumed["time"] is False
