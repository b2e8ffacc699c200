"""The replay payload and its table: a planned replay run carries its table row (found by its configuration, its
figure turned into a step time), the payload prints a Megatron-Bridge log the log parser reads back to that step
time within the stated noise, a row the table says did not fit ends with CUDA's out-of-memory line, a configuration
the table has no row for ends with an error, and bad tables are refused by rule."""

from __future__ import annotations

import csv
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bridgebench.config.compose import compose
from bridgebench.logs.parser import parse_log
from bridgebench.payloads.replay import step_times
from bridgebench.results.replay_table import ReplayTableError, lookup
from bridgebench.validation.data import data_dir, missing_message

SHARED = data_dir("ablations")  # configs/paths: ../shared/reference/ablations beside the clone
SET = "dgxc_v2503_llama31_70b_h100"
POINT = [
    "experiment=replay", "model=llama3_70b", "gpu=h100", "model.tensor_model_parallel_size=4",
    "model.pipeline_model_parallel_size=4", "model.virtual_pipeline_model_parallel_size=5",
    "model.context_parallel_size=2", "model.sequence_parallel=true", "train.micro_batch_size=1",
]  # fmt: skip


@pytest.fixture()
def tables(tmp_path, monkeypatch):
    src = SHARED
    if not (src / f"{SET}.csv").is_file():
        pytest.skip(missing_message("ablations", src / f"{SET}.csv"))
    shutil.copy(src / f"{SET}.csv", tmp_path / f"{SET}.csv")
    with open(src / f"{SET}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    oom = dict(rows[0], num_gpus="32", gbs="64", dp="1", measured_value="", notes="did not fit: OOM at 32 GPUs")
    with open(tmp_path / "with_oom.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows([rows[0], oom])
    monkeypatch.setenv("BRIDGEBENCH_ABLATIONS", str(tmp_path))
    return tmp_path


def _cfg(*extra):
    return compose([*POINT, *extra])


def _run(tmp_path, cfg, row, run_id="0123abcd-r0"):
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    cfg.job.replay.row = row
    path = tmp_path / "config.yaml"
    path.write_text(OmegaConf.to_yaml(cfg))
    log = tmp_path / "log-replay.out"
    with open(log, "w") as out:
        rc = subprocess.run(
            [sys.executable, "-m", "bridgebench.payloads.replay", "--config", str(path)], stdout=out,
            stderr=subprocess.STDOUT, env={"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"),
                                            "BRIDGEBENCH_RUN_ID": run_id, "PATH": "/usr/bin:/bin"}, timeout=120,
        ).returncode  # fmt: skip
    return rc, log


def test_a_row_is_found_by_its_configuration_and_replayed(tables, tmp_path):
    cfg = _cfg("precision=fp8_cs", "num_gpus=128", "train.global_batch_size=256")
    row = lookup(cfg, tables)
    assert row["status"] == "measured" and row["row"] == 8 and row["measured_value"] == "10.52"
    assert row["step_time_s"] == pytest.approx(10.52) and len(row["file_sha256"]) == 64
    rc, log = _run(tmp_path, cfg, row)
    assert rc == 0
    parsed = parse_log(log)
    assert parsed.outcome == "completed" and parsed.format == "megatron_bridge"
    text = log.read_text()
    assert "BRIDGEBENCH_START" in text and "noise of 1.0 %" in text  # the noise is stated
    assert parsed.steady["step_time_s"].count == 10  # 20 iterations, the parser's 10 warm-up skipped
    assert abs(parsed.steady["step_time_s"].mean / 10.52 - 1) < 0.02  # 1 % log-normal noise, mean of 10
    # seeded: the same run id gives the same times, another run id others
    assert step_times(10.52, 20, 1.0, 0, "0123abcd-r0") == step_times(10.52, 20, 1.0, 0, "0123abcd-r0")
    assert step_times(10.52, 20, 1.0, 0, "0123abcd-r0") != step_times(10.52, 20, 1.0, 0, "0123abcd-r1")
    assert statistics.pstdev(step_times(10.0, 2000, 1.0, 3, "x")[1:]) == pytest.approx(0.1, rel=0.1)


def test_did_not_fit_and_no_row_end_like_real_jobs(tables, tmp_path):
    cfg = _cfg("precision=bf16", "num_gpus=32", "train.global_batch_size=64", "job.replay.table=with_oom")
    row = lookup(cfg, tables)
    assert row["status"] == "oom" and row["step_time_s"] is None
    rc, log = _run(tmp_path, cfg, row)
    assert rc == 1 and parse_log(log).outcome == "oom"
    cfg = _cfg("precision=bf16", "num_gpus=96", "train.global_batch_size=192")
    assert lookup(cfg, tables) is None  # 96 GPUs: no such row
    rc, log = _run(tmp_path, cfg, None)
    assert rc == 1 and "has no row for this configuration" in log.read_text()
    assert parse_log(log).outcome != "completed"


@pytest.mark.parametrize("table, match", [("nope", "no table"), ("../x", "must name a set"), ("", "not set")])
def test_bad_tables_are_refused(tables, table, match):
    with pytest.raises(ReplayTableError, match=match):
        lookup(_cfg("precision=bf16", "num_gpus=64", "train.global_batch_size=128", f"job.replay.table='{table}'"),
               tables)  # fmt: skip
