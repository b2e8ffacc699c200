"""FLOPs/token x published tokens/s/GPU reproduces the published model TFLOP/s/GPU for every row of the six models."""

from __future__ import annotations

from bridgebench.results.records import load_published
from bridgebench.validation.published_check import check_published


def test_every_published_row_of_the_six_models(capsys):
    records = load_published()
    df, summary = check_published(records)
    known = [r for r in records if r.model and r.model_tflops_per_gpu]
    assert summary.rows == len(known) == len(df) >= 180
    with capsys.disabled():
        print(
            f"\n[published check] rows={summary.rows} within rounding={summary.within_rounding} "
            f"max|err|={summary.max_abs_error:.4%} median|err|={summary.median_abs_error:.4%} "
            f"outside={summary.rows_outside} (in self-inconsistent groups: "
            f"{summary.rows_outside_in_inconsistent_groups})"
        )
    # Nearly every row within the rounding of its own published figures ...
    assert summary.within_rounding >= 0.85 * summary.rows
    assert summary.median_abs_error < 0.001
    # ... and a row outside it either belongs to a group of published rows that no constant FLOPs/token can fit
    # (the table contradicts itself), or misses its bound by less than 0.015 percentage points.
    outside = df[~df.within_rounding]
    stray = outside[outside.group_consistent & ((outside.rel_error.abs() - outside.rounding_bound) > 1.5e-4)]
    assert stray.empty, stray.to_string()
    # The rounded-token releases still land within their (wider) bound.
    assert df[df.release.isin(["26.04.01", "26.06.01", "26.08"])].within_rounding.all()


def test_a_wrong_architecture_would_fail_the_check():
    """The check has teeth: Kimi K2 with one layer fewer misses every one of its rows."""
    from bridgebench.config.compose import compose, model_spec

    records = [r for r in load_published() if r.model == "kimi_k2"]
    df, _ = check_published(records)
    assert df.within_rounding.all()
    from bridgebench.model.flops import model_flops_per_token

    kimi = model_spec(compose(["model=kimi_k2"]))
    wrong = float(model_flops_per_token(kimi.replace(num_layers=60, moe_layer_freq=kimi.moe_layer_pattern[:60])))
    for row in df.itertuples():
        assert abs(wrong * row.tokens_per_sec_per_gpu / 1e12 / row.published_tflops - 1) > row.rounding_bound
