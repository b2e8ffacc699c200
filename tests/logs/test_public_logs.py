"""Held-out public log excerpts (tests/data/logs/SOURCES.md, "Public excerpts"): every excerpt gives the per-step
figures computed by hand from its printed values (public_expected.json), and its headline figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridgebench.logs.parser import parse_log, to_json

LOGS = Path(__file__).parents[1] / "data" / "logs"
EXPECTED = json.loads((LOGS / "public_expected.json").read_text())
#: the collector's outcome words -> bridgebench's (the parser cannot see a hang or an excerpt's end: 'incomplete')
OUTCOME = {
    "running-truncated": "incomplete",
    "hang": "incomplete",
    "unknown": "incomplete",
    "completed": "completed",
    "NaN": "nan",
    "crash": "crash",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_public_excerpt_gives_its_figures(name):
    e = EXPECTED[name]
    p = parse_log(LOGS / name)
    timed = [s for s in p.steps if s.step_time_s is not None]
    assert [s.step_time_s for s in timed] == pytest.approx(e["step_times_s"], abs=1e-9)
    assert [s.iteration for s in p.steps if not s.inferred_iteration] == e["iterations"]
    if e["tflops_per_gpu"]:
        assert [s.tflops_per_gpu for s in p.steps] == e["tflops_per_gpu"]
    else:
        assert all(s.tflops_per_gpu is None for s in p.steps)
    assert p.outcome == OUTCOME[e["outcome"]]
    j = to_json(p)
    if e["mean_step_time_s"] is None:
        assert j["step_time_s"] is None and j["quality"] is None and "none with a step time" in j["note"]
        return
    # the headline is always there; its window is the steps after warm-up 10 (by iteration number), else all
    w = j["window"]
    used = [s.step_time_s for s in timed if w["first_iteration"] <= s.iteration <= w["last_iteration"]]
    assert j["step_time_s"] == pytest.approx(sum(used) / len(used))
    assert w["count"] == len(used) and w["count"] + w["warmup_skipped"] == len(timed)
    assert j["quality"] in ("short", "incomplete", "excerpt", "steady")
    series = [v for v in j["series"]["step_time_s"] if v is not None]
    assert sum(series) / len(series) == pytest.approx(e["mean_step_time_s"], abs=1e-6)  # hand mean, 6 decimals


def test_how_many_public_excerpts_give_figures():
    got_time = got_tflops = 0
    for name in EXPECTED:
        j = to_json(parse_log(LOGS / name), series=False)
        got_time += j["step_time_s"] is not None
        got_tflops += j["tflops_per_gpu"] is not None
    # 17 of 18 print a step time (launcher_i55's bar has only tqdm's running average); 6 print TFLOP/s
    assert (got_time, got_tflops) == (17, 6)
    assert got_time == sum(bool(e["step_times_s"]) for e in EXPECTED.values())
    assert got_tflops == sum(bool(e["tflops_per_gpu"]) for e in EXPECTED.values())


def test_fork_fields_deepspeed_tgs_and_seconds():
    p = parse_log(LOGS / "mds_alcf_iter199_200_tgs_tflops_crash_at_ckpt.log")
    assert [s.tokens_per_s_per_gpu for s in p.steps] == [1146.733, 1126.713]
    assert to_json(p)["tokens_per_s_per_gpu"] == pytest.approx((1146.733 + 1126.713) / 2)
    assert p.outcome == "crash" and p.outcome_detail.startswith("AttributeError")
    s = parse_log(LOGS / "bigscience_176b_default7_single_iter_seconds.log").steps[0]
    assert (s.step_time_s, s.tflops_per_gpu, s.rank) == (105.22, 149.02, "[default7]")  # '(s)' is seconds


def test_legacy_2019_fields_without_colons():
    s = parse_log(LOGS / "mlm_i5_bert_2019_old_format_gaps100.log").steps[0]
    assert s.learning_rate == pytest.approx(2.020e-06) and s.lm_loss == pytest.approx(9.444483)
    assert s.extra["nsp loss"] == pytest.approx(0.248678)


def test_fp16_loss_scale_skips_are_not_nan():
    # 2020 GPT-2 fp16 run: every early iteration skipped by the dynamic loss scaler (loss scale 2**28 ...)
    p = parse_log(LOGS / "mlm_i60_gpt2_v100_2020_gaps5_memline.log")
    assert p.steps[0].skipped == 5 and p.steps[0].loss_scale > 1 and p.outcome == "incomplete"
    assert p.memory["ranks_reported"] == [0] and p.memory["peak_allocated_mb"] == pytest.approx(12606.06201171875)


def test_progress_bar_nan_loss_is_nan_outcome_with_figures():
    p = parse_log(LOGS / "nemo_i7957_nemo1_progressbar_nan_loss.log")
    (s,) = p.steps
    assert (s.iteration, s.total_iters, s.step_time_s) == (9000, 301500, 0.615)
    assert p.outcome == "nan" and p.format == "nemo1" and to_json(p)["step_time_s"] == 0.615
