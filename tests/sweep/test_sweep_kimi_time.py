"""The Kimi K2 sweep on 256 GB300 (``configs/sweep/kimi_k2_256.yaml``, release 26.02.01) through stages 1-4: the time
model prices every parallelism and upstream's start-up assertions hold (HybridEP EP <= 72; ranks placed as
Megatron-Bridge's launcher segments them: four 64-GPU racks), so NVIDIA's own configuration (TP1 PP4 VP4 EP64 MBS2,
selective recompute of ``mla_up_proj``) ranks within one prediction band of the top point, no top point fails an
upstream assertion, the top points are told apart by their terms, CP pairs differ, every EP > 1 point pays an
all-to-all, and expert groups that leave their segment pay the scale-out price."""

from __future__ import annotations

import json

import pytest

from bridgebench import sweep as engine
from bridgebench.config import calibration

TERM_COLUMNS = ("t_compute_s", "t_elementwise_s", "t_tp_comm_s", "t_cp_comm_s", "t_ep_a2a_s", "t_recompute_s",
                "t_overhead_s", "t_bubble_s", "t_pp_p2p_s", "t_dp_comm_s", "t_optimizer_s")  # fmt: skip


@pytest.fixture(scope="module")
def rows():
    calib = calibration.load()
    space = engine.parse_space([], "kimi_k2_256")
    bases = engine.compose_bases(space)
    return engine.run_pipeline(bases, calib, space=space)


@pytest.fixture(scope="module")
def ranked(rows):
    # the ranked points in rank order, then the points collapsed into an indistinguishable twin (status indistinct)
    timed = [r for r in rows if r["status"] in ("ranked", "indistinct")]
    return sorted(timed, key=lambda r: (r["rank"] is None, r["rank"] or 0))


@pytest.mark.parametrize("release, published_tflops", [("26.02", 699), ("26.08", 1029)])
def test_muon_cost_adamw_step_is_the_release_s_number(release, published_tflops):
    """The issue's case: Qwen3 30B-A3B on 8 GB300 at 26.02 and 26.08 (published 8.63 s and 5.89 s AdamW steps)
    gives each release's number, within its band, through the recipe as the sweep composes it."""
    from bridgebench.model.steptime.muon import adam_counterpart
    from bridgebench.model.steptime.predict import predict_time

    base = engine.base_of(["recipe=qwen3_30b_a3b_gb300_mxfp8", f"release={release}", "optimizer=muon"])
    cfg = engine.time_config(engine.effective(base, {}), base.gpu)
    adam = predict_time(base.spec, adam_counterpart(cfg), calibration.load().time)
    published_s = adam.flops / 8 / (published_tflops * 1e12)
    assert adam.release == release
    assert adam.total == pytest.approx(published_s, rel=adam.band)


def _nvidia(r) -> bool:
    mods = r.get("recompute_modules")
    mods = mods.split(",") if isinstance(mods, str) else list(mods or [])
    return (r["tp"], r["pp"], r["vp"], r["cp"], r["ep"], r["mbs"]) == (1, 4, 4, 1, 64, 2) and (
        r["recompute_granularity"] == "selective" and mods == ["mla_up_proj"]
    )


def _nvidia_best(ranked):
    mine = [r for r in ranked if _nvidia(r) and r["etp"] in (None, 1)]
    assert mine, "NVIDIA's Kimi K2 configuration was pruned or not ranked"
    best = max(mine, key=lambda r: r["tflops_per_gpu"])
    assert best["release"] == "26.02.01" and ranked[0]["band_pct"] > 0
    return best


def test_nvidia_configuration_cannot_be_told_from_the_top_point_at_two_bands(ranked):
    """The band is the ~68 % conformal band (bridgebench.model.steptime.bands): NVIDIA's configuration lies within
    two bands of the top point, so the model cannot say that the top point (EP 128 across two NVL72 racks, never
    measured) beats what NVIDIA ran."""
    top, best = ranked[0], _nvidia_best(ranked)
    assert best["tflops_per_gpu"] >= top["tflops_per_gpu"] * (1 - 2 * top["band_pct"] / 100)


def test_nvidia_configuration_is_within_the_band_of_the_top_point(ranked):
    """Issue 22's target, met through the physics, not by tuning to the row: HybridEP's EP <= 72 and the placement
    of 256 GB300 as four 64-GPU segments (Megatron-Bridge's --segment) remove the EP 128 points that topped the
    ranking while priced as if a 72-GPU domain held most of their group. The top point's band is the conformal ~68 %
    band of its distance from the calibration (bridgebench.model.steptime.bands): a configuration no published run
    measured carries the held-out spread of new configurations; NVIDIA's own configuration, published at another
    release, a narrower one. NVIDIA's configuration lies inside the top point's band."""
    top, best = ranked[0], _nvidia_best(ranked)
    assert top["band_source"] == "conformal, new configuration"
    assert best["band_source"] == "conformal, seen configuration" and best["band_pct"] < top["band_pct"]
    assert best["tflops_per_gpu"] >= top["tflops_per_gpu"] * (1 - top["band_pct"] / 100)


def test_no_top_point_fails_an_upstream_assertion(ranked):
    """Every top-8 point passes the rules again -- HybridEP's launcher and buffer assertions on the dispatcher
    that runs, and Megatron-Core's -- with the placement the time model priced (every expert group of the top 8
    inside one 64-GPU segment)."""
    from bridgebench.config import rules

    space = engine.parse_space([], "kimi_k2_256")
    bases = engine.compose_bases(space)
    for r in ranked[:8]:
        base = bases[r["base"]]
        delta = json.loads(r["delta"])
        v = engine.effective(base, delta)
        assert rules.check(engine.rule_point(v, base.spec, base.rule_env(delta))) == [], r["point_id"]
        assert r["ep"] <= 72 and r["dispatcher"] == "hybridep" and r["domain_gpus"] == 64
        assert r["segment_nodes"] == 16 and r["ep_leaves_nvlink"] is False


def test_rules_removed_the_ep_128_points_and_say_so(rows):
    counts = engine.summarize(rows)
    ups = counts["upstream_rules"]
    assert ups["hybridep_ep_domain"] == sum(1 for r in rows if r["ep"] > 72 and r["status"] == "invalid")
    assert ups["hybridep_ep_domain"] > 0 and not any(r["ep"] > 72 for r in rows if r.get("rank"))


def test_the_top_points_differ_on_some_term(ranked):
    top = ranked[:8]
    for i, a in enumerate(top):
        for b in top[i + 1 :]:
            assert any(abs(a[c] - b[c]) > 1e-9 * max(1.0, abs(a[c])) for c in TERM_COLUMNS), (
                a["point_id"],
                b["point_id"],
            )


def test_cp_pairs_differ_and_ep_is_never_free(ranked):
    by_key = {}
    for r in ranked:
        key = tuple(r[k] for k in ("tp", "pp", "vp", "ep", "etp", "mbs", "recompute_granularity"))
        by_key.setdefault(key, {})[r["cp"]] = r
    pairs = [v for v in by_key.values() if 1 in v and 2 in v]
    assert pairs
    for v in pairs:
        assert v[1]["t_cp_comm_s"] == 0 < v[2]["t_cp_comm_s"]
        assert v[1]["step_time_s"] != v[2]["step_time_s"]
    assert all(r["t_ep_a2a_s"] > 0 for r in ranked if r["ep"] > 1)
    # placement: an EP group leaves its 64-GPU segment exactly when ETP x EP > 64 (EP 64 at ETP 2: 32/32)
    wide = [r for r in ranked if r["ep"] * (r["etp"] or r["tp"]) > 64]
    assert wide and all(r["ep_scale_out"] and r["ep_leaves_nvlink"] and r["ep_split"] == "32/32" for r in wide)
    assert not any(r["ep_scale_out"] or r["ep_leaves_nvlink"] for r in ranked if r["ep"] * (r["etp"] or r["tp"]) <= 64)
