"""Report statistics over optimizer-step repeats: median, IQR, CI, count; contended repeats set aside, outliers
flagged; the load probe that tells a contended repeat (real: a CPU-burning process next to it)."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from scipy import stats

from bridgebench.payloads.cpu_contention import LoadProbe
from bridgebench.results.optstep_stats import CONTENDED_OTHER_SHARE, aggregate, summarize


def record(i: int, muon: float, adamw: float, other_share: float | None, config: str = "cfg1") -> dict:
    fam = {
        "matrices": 3,
        "params": 10,
        "muon_step_s": muon,
        "adamw_step_s": adamw,
        "ratio": muon / adamw,
        "ns_time_s": muon * 0.8,
        "ns_flops": 1e9,
        "ns_flops_per_s": 1e9 / (muon * 0.8),
    }
    load = None if other_share is None else {"other_share": other_share, "cpus": 2}
    return {
        "record_id": f"local-x/{i}/uid{i}/optstep",
        "kind": "optstep",
        "state": "COMPLETED",
        "model": "m",
        "device": "cpu",
        "provenance": {"config_hash": config},
        "optstep": {"families": {"attention": fam}, "total": fam, "load": load},
    }


def test_median_iqr_and_ci_match_numpy_and_scipy():
    x = [2.0, 2.1, 1.9, 2.05, 2.2, 1.95, 2.15]
    s = summarize(x)
    assert s["n"] == 7 and s["median"] == pytest.approx(np.median(x))
    assert s["iqr"] == pytest.approx(stats.iqr(x)) and s["q1"] < s["median"] < s["q3"]
    ci = stats.quantile_test(x, q=np.median(x), p=0.5).confidence_interval(0.95)
    assert s["ci95"] == [pytest.approx(ci.low), pytest.approx(ci.high)]
    assert summarize(x[:5])["ci95"] is None  # n < 6: no 95 % interval from order statistics
    assert summarize([])["median"] is None


def test_contended_repeat_is_set_aside_and_outlier_flagged():
    recs = [record(i, 2.0 + 0.01 * i, 1.0, 0.01) for i in range(5)]
    recs.append(record(5, 9.0, 1.0, 0.02))  # a slow repeat nobody else disturbed: an outlier
    recs.append(record(6, 6.0, 1.0, 0.55))  # other processes took 55 % of the CPU: contended
    rows, reps = aggregate(recs)
    total = next(r for r in rows if r["family"] == "total")
    assert total["n"] == 6 and total["n_contended"] == 1 and total["n_outliers"] == 1
    assert total["basis"] == "uncontended repeats"
    ratios = [2.0 + 0.01 * i for i in range(5)] + [9.0]
    assert total["ratio"] == pytest.approx(np.median(ratios)) and total["stats"]["ratio"]["iqr"] > 0
    flags = {r.record_id: r.flags for r in reps if r.family == "total"}
    assert any(f.startswith("contended") for f in flags["local-x/6/uid6/optstep"])
    assert any(f.startswith("outlier") for f in flags["local-x/5/uid5/optstep"])
    assert all(not f for rid, f in flags.items() if rid.split("/")[1] in "01234")


def test_all_contended_is_shown_flagged_not_hidden():
    rows, _ = aggregate([record(i, 2.0, 1.0, 0.8) for i in range(3)] + [record(9, 2.0, 1.0, None, "cfg2")])
    by = {r["config_hash"]: r for r in rows if r["family"] == "total"}
    assert by["cfg1"]["basis"].startswith("contended") and by["cfg1"]["n"] == 3
    assert any(f.startswith("CONTENDED") for f in by["cfg1"]["flags"])
    assert by["cfg2"]["n"] == 1 and by["cfg2"]["repeats"][0]["flags"] == ["load unknown"]


def test_ns_slower_than_the_whole_step_is_flagged():
    rec = record(0, 1.0, 1.0, 0.0)
    rec["optstep"]["total"] = {**rec["optstep"]["total"], "ns_time_s": 3.0}
    rows, _ = aggregate([rec])
    total = next(r for r in rows if r["family"] == "total")
    assert any(f.startswith("ns > step") for f in total["flags"])


def test_load_probe_sees_a_cpu_burner_and_the_report_flags_that_repeat():
    """A real competing process: the probe's other_share rises above the threshold, and a record carrying that
    probe is flagged contended (the quiet control may be contended too on a shared machine: only the burner window
    is asserted)."""
    import os

    n = max(1, (os.cpu_count() or 2) // 2)  # burners for half the node's CPUs
    code = "import time\nt = time.time()\nwhile time.time() - t < 30: pass"
    burners = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        time.sleep(0.5)
        probe = LoadProbe.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.0:
            sum(range(10000))  # our own work during the window
        load = probe.stop()
    finally:
        for b in burners:
            b.kill()
            b.wait()
    assert load["other_share"] >= 0.25 and load["other_share"] >= CONTENDED_OTHER_SHARE, load
    assert 0 < load["own_share"] <= load["busy_share"] <= 1 and load["window_s"] >= 2.0
    contended = record(3, 3.0, 1.0, 0.0)
    contended["optstep"]["load"] = load
    rows, reps = aggregate([record(1, 2.0, 1.0, 0.0), record(2, 2.1, 1.0, 0.0), contended])
    flagged = [r for r in reps if r.contended and r.family == "total"]
    assert [r.record_id for r in flagged] == [contended["record_id"]]
