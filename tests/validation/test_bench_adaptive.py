"""benchmarks/bench_adaptive.py on a set of the shared ablation layout given with --ablations: one JSON object with
the issue's keys, runs-to-2 % counted on the set's own figures, and a set too small to be a space refused by name."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bridgebench.validation.data import data_dir, missing_message

REPO = Path(__file__).resolve().parents[2]
SET = "dgxc_v2503_llama31_70b_h100"


def _shared() -> Path:
    p = data_dir("ablations")  # configs/paths: ../shared/reference/ablations beside the clone
    if (p / f"{SET}.csv").is_file():
        return p
    pytest.skip(missing_message("ablations", p / f"{SET}.csv"))


def _bench(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_adaptive.py"), "--json", "--ablations", str(folder)],
        capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_json_on_another_folder(tmp_path):
    with open(_shared() / f"{SET}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    bf16 = [r for r in rows if r["precision"] == "bf16"]
    # the same layout under another set id, the slowest row made the best: the bench must find it, not the model's pick
    best = dict(bf16[-1], set_id="mine", measured_value=str(float(bf16[-1]["measured_value"]) * 0.8))
    with open(tmp_path / "mine.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows([dict(r, set_id="mine") for r in bf16[:-1]] + [best])
    res = _bench(tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert {"median_runs_to_2pct", "mape_after_3_pct", "worse_than_random_sets"} <= set(out)
    # both aggregations are given and named; with one space the pooled MAPE is that space's, as is the mean
    assert "mean over spaces" in out["mape_aggregation"] and "pooled" in out["mape_aggregation"]
    assert out["mape_after_3_pct_pooled"] == pytest.approx(out["mape_after_3_pct"])
    assert 0.0 <= out["band_coverage_after_3"] <= 1.0
    (s,) = out["sets"]
    assert s["set"] == "mine" and s["points"] == 6 and s["best"] == "mine#5"
    assert s["grid"] == 6  # the best is the file's last row
    assert 1 <= s["adaptive"] <= 6 and len(s["mape_after_pct"]) == 4
    assert out["worse_than_random_sets"] == (["mine"] if s["adaptive"] > s["random_median"] else [])
    (tmp_path / "mine.csv").write_text("".join(open(tmp_path / "mine.csv").readlines()[:4]))
    res = _bench(tmp_path)
    assert res.returncode != 0 and ">= 6 configurations" in res.stderr
