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
