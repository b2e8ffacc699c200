"""bridgebench.validation.time_calibration.fit_report (``bridgebench calibrate``): the fit statistics the CLI prints
come from bridgebench.validation.metrics over the calibration's own in-sample and held-out predictions."""

from __future__ import annotations

import math
import statistics

import pytest

from bridgebench.model.steptime.fit import calibrate_with_bands
from bridgebench.model.steptime.predict import predict_time
from bridgebench.validation.gemm_fit import measured_gemm_rates
from bridgebench.validation.time_calibration import fit_report, published_rows


def test_the_report_scores_the_fit_it_returns():
    rows = [r for r in published_rows() if r.model == "Qwen3_30B_a3B" and r.system == "gb300"]
    assert len({r.release for r in rows}) >= 3
    report = fit_report(rows)
    kw = dict(kappa=report.calibration.kappa, ns_efficiency=report.calibration.ns_efficiency)
    cal, held = calibrate_with_bands(rows, **kw)
    # the report adds the large-GEMM rates measured on the lent H100 (their ratio is H100's class ratio)
    assert report.calibration.measured_rates == measured_gemm_rates() and not cal.measured_rates
    cal.measured_rates = measured_gemm_rates()
    assert report.calibration.to_mapping() == cal.to_mapping()
    # Muon's constants are fitted on the blog's two Table 1 pairs (two equations, two unknowns: met exactly) and
    # every measured pair's residual is reported, the golden ones too
    names = [name for name, _, _ in report.muon.residuals]
    assert names[:2] == ["blog Kimi K2", "blog Qwen3 30B-A3B"] and any(n.startswith("golden") for n in names)
    for _, measured, predicted in report.muon.residuals[:2]:
        assert predicted == pytest.approx(measured, abs=1e-3)
    assert 0.05 <= report.calibration.ns_efficiency <= 1 and 0 <= report.calibration.kappa <= 1e-3
    errors = [predict_time(r.spec, r.cfg, cal).tflops_per_gpu / r.tflops - 1 for r in rows]
    out = [p / r.tflops - 1 for r, p in zip(rows, held) if p]
    assert report.rows == len(rows) and report.held_out_rows == len(out) > 0
    assert report.median_abs_error == pytest.approx(statistics.median(abs(e) for e in errors))
    assert report.held_out_mape == pytest.approx(statistics.mean(abs(e) for e in out))
    assert report.geometric_rms == pytest.approx(
        math.exp(math.sqrt(statistics.mean(math.log1p(e) ** 2 for e in errors))) - 1
    )
    assert f"held-out (leave one release out) MAPE {report.held_out_mape:.1%} over {len(out)} rows" in report.source
    assert report.releases == tuple(sorted({r.release for r in rows}, key=lambda x: [int(p) for p in x.split(".")]))


def test_no_published_row_is_priced_with_an_ep_overlap_megatron_core_refuses():
    """Rule ``ep_overlap_needs_vp``: a row printed at PP > 1 without VP cannot have run a recipe's EP all-to-all
    overlap (Megatron-Core asserts VP for it), so it is priced without; rows with VP keep their recipe's overlap."""
    from bridgebench.config.rules.upstream import ep_overlap_finding

    rows = published_rows()
    assert not [r for r in rows if ep_overlap_finding(overlap=r.cfg.overlap_moe_expert_parallel_comm, pp=r.cfg.pp,
                                                      vp=r.cfg.vp)]  # fmt: skip
    # Qwen3 235B-A22B on GB200 at 26.02 (PP 8, no VP) ran without it; at 26.06 (PP 8 VP 3) with the recipe's; at
    # 26.04 (PP 8 VP 3 too) without, as its release's launcher ran it (published_settings.yaml)
    q235 = {r.release: r.cfg for r in rows if r.model == "Qwen3_235B_a22B" and r.system == "gb200"}
    assert q235["26.02"].vp is None and not q235["26.02"].overlap_moe_expert_parallel_comm
    assert q235["26.06"].vp == 3 and q235["26.06"].overlap_moe_expert_parallel_comm
    assert q235["26.04"].vp == 3 and not q235["26.04"].overlap_moe_expert_parallel_comm


def test_an_ablation_row_stating_ep_overlap_without_vp_is_priced_without_it_and_says_so():
    """The Megatron-LM dev Qwen3 235B-A22B H100 row states 'EP overlap' at PP 8 and no VP: priced without the
    overlap Megatron-Core would refuse, with the reason in its notes (rule ``ep_overlap_needs_vp``)."""
    from bridgebench.config.catalog import load_gpu
    from bridgebench.model.steptime.config import GpuFacts
    from bridgebench.validation.ablation_time import gpu_of, point_of
    from bridgebench.validation.ablations import read_set, set_files

    (path,) = [p for p in set_files() if p.stem == "mlm_dev_moe_recipes_qwen3"]
    stated = [r for r in read_set(path) if "ep overlap" in r["notes"].lower()]
    cfgs = {r["gpu"]: point_of(r, GpuFacts.from_mapping(load_gpu(gpu_of(r["gpu"])[0]))) for r in stated}
    h100, notes = cfgs["H100"]
    assert h100.pp == 8 and h100.vp is None and not h100.overlap_moe_expert_parallel_comm
    assert any("ep_overlap_needs_vp" in n for n in notes)
    b200, notes = cfgs["B200"]  # PP 4 VP 12: the overlap as stated
    assert b200.vp == 12 and b200.overlap_moe_expert_parallel_comm and not any("ep_overlap" in n for n in notes)


def test_a_row_printed_with_sizes_its_release_never_ran_is_priced_with_the_launchers():
    """published_settings.yaml ``replaces_printed``: 26.02.01's H100 Qwen3 30B-A3B row prints 26.02's PP 2 VP 12 EP 8;
    its release's launcher (v0.3.1, PR #2477) ran EP 16 on one pipeline stage with HybridEP. The time row takes the
    launcher's sizes and the layout that goes with them; 26.02's row keeps its printed ones."""
    rows = {r.release: r.cfg for r in published_rows() if r.model == "Qwen3_30B_a3B" and r.system == "h100"}
    ran = rows["26.02.01"]
    assert (
        (ran.pp, ran.vp, ran.ep, ran.mbs)
        == (1, None, 16, 1)
        == (rows["26.04"].pp, rows["26.04"].vp, rows["26.04"].ep, rows["26.04"].mbs)
    )
    assert (
        ran.dispatcher == "hybridep"
        and ran.pipeline_model_parallel_layout == rows["26.04"].pipeline_model_parallel_layout
    )
    assert (rows["26.02"].pp, rows["26.02"].vp, rows["26.02"].ep) == (2, 12, 8) and rows["26.02"].dispatcher == "deepep"


def test_each_release_is_priced_with_the_knobs_its_launcher_ran():
    """published_settings.yaml: the launcher of each container, not 0.6.2's recipe nor the nearest recipe bridgebench
    ships, sets a row's dispatcher, EP overlap, recompute modules and HybridEP token budget."""
    rows = {(r.model, r.system, r.release): r.cfg for r in published_rows() if r.precision in ("mxfp8", "fp8_cs")}
    b300 = {rel: rows["Qwen3_235B_a22B", "b300", rel].dispatcher for rel in ("26.02", "26.04", "26.04.01")}
    assert b300 == {"26.02": "alltoall", "26.04": "alltoall", "26.04.01": "hybridep"}  # HybridEP from v0.4.2
    dsv3 = {rel: rows["DeepSeekV3", "gb200", rel] for rel in ("26.04", "26.06")}
    assert dsv3["26.04"].recompute_modules == ("mlp",) and not dsv3["26.04"].overlap_moe_expert_parallel_comm
    assert dsv3["26.04"].moe_expert_rank_capacity_factor is None and dsv3["26.04"].host_synced_dispatch
    assert dsv3["26.06"].overlap_moe_expert_parallel_comm and dsv3["26.06"].moe_expert_rank_capacity_factor == 1.5
    assert not dsv3["26.06"].host_synced_dispatch
    # a group bridgebench ships recipes for: 26.04 shares 26.08's sizes, but its launcher had neither the EP
    # overlap nor the token budget (v0.5.0's full-iteration preset brought both)
    gb300 = rows["Qwen3_235B_a22B", "gb300", "26.04"]
    assert not gb300.overlap_moe_expert_parallel_comm and gb300.moe_expert_rank_capacity_factor is None
    assert rows["Qwen3_235B_a22B", "gb300", "26.06"].moe_expert_rank_capacity_factor == 1.5
    # 25.09's dropless DeepSeek V3 run on H100 used DeepEP (HybridEP did not exist yet)
    assert rows["DeepSeekV3", "h100", "25.09"].dispatcher == "deepep"
