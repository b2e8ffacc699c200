"""bridgebench.validation.published_models (``check-published --models``): every row predicted with its release held
out, its band, and the memory model's verdict; on a few groups of the shipped table to stay fast."""

from __future__ import annotations

import math

from bridgebench.validation.published_models import check_models
from bridgebench.validation.time_calibration import published_rows


def test_every_row_is_predicted_without_its_release_and_gets_a_memory_verdict():
    rows = [r for r in published_rows() if r.model in ("Qwen3_30B_a3B", "Kimi_K2") and r.system == "gb300"]
    assert len({r.release for r in rows}) >= 4
    df, summary = check_models(rows)
    assert summary.rows == len(rows) == len(df)
    assert summary.predicted == len(rows)  # every release has neighbours in the other releases' rows
    errs = (df["predicted_tflops"] / df["published_tflops"] - 1).abs()
    assert math.isclose(summary.mape, errs.mean(), rel_tol=1e-9)
    assert summary.within_band == int((errs <= df["band"]).sum())
    assert summary.fits + summary.false_prunes + summary.inconsistent == len(rows)
    assert set(summary.mape_by_release) == {r.release for r in rows}
    # the memory verdict is the sweep pipeline's (bridgebench.validation.published_points): GB300's memory as the
    # driver counts 288 datasheet GB, less the lowest measured allocator fragmentation
    assert (df["memory_gb"] > 0).all() and df["usable_gb"].round(1).eq(round(288 * 1.0681 / 1.01, 1)).all()
    assert summary.false_prunes == 0 and summary.fits == len(rows)
    # leave one configuration out: every release of a configuration held out together; Kimi K2's one GB300
    # configuration is then a model nobody measured on this subset, Qwen3's MBS-4 rows a new configuration
    loco = (df["loco_tflops"] / df["published_tflops"] - 1).abs()
    assert math.isclose(summary.loco_mape, loco.mean(), rel_tol=1e-9)
    kimi = df[df.model == "Kimi_K2"]
    assert set(kimi["loco_distance"]) == {"uncalibrated model"}
    assert set(df.loc[(df.model == "Qwen3_30B_a3B") & (df.mbs == 4), "loco_distance"]) == {"new configuration"}
    for name in ("loro", "loco"):
        cov = summary.coverage[name]
        assert set(cov) == {50, 68, 90} and cov[50] <= cov[68] <= cov[90] <= 1
        col = "rel_error" if name == "loro" else "loco_error"
        inside = (df[col].apply(lambda e: abs(math.log1p(e))) <= df[f"{name}_band_68"].apply(math.log1p)).mean()
        assert math.isclose(cov[68], inside)
    assert (df["loco_band_90"] >= df["loco_band_68"]).all() and (df["loco_band_68"] >= df["loco_band_50"]).all()
