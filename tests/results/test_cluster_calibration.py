"""Measured beside predicted and a cluster's own calibration, without a cluster: records that kept their plan's
prediction are refitted (calibrate --from-runs), the calibration is written beside the user's configs with its
provenance, and predict / the sweep pipeline then price points through it; replayed and measured records are never
mixed unasked; bad names are refused by rule."""

from __future__ import annotations

import pytest
import yaml

from bridgebench import sweep as engine
from bridgebench.config import calibration as calib_mod
from bridgebench.model import refit
from bridgebench.results import cluster_calibration as cc
from bridgebench.results import vs_predicted

POINT = ["experiment=replay", "model=llama3_70b", "gpu=h100", "precision=fp8_cs", "model.tensor_model_parallel_size=4",
         "model.pipeline_model_parallel_size=4", "model.virtual_pipeline_model_parallel_size=5",
         "model.context_parallel_size=2", "model.sequence_parallel=true", "train.micro_batch_size=1"]  # fmt: skip


def _record(n: int, slower: float, payload: str = "replay", i: int = 0) -> dict:
    """A completed record of ``n`` GPUs whose measured step is ``slower`` x the plan's prediction."""
    row = engine.predict([*POINT, f"num_gpus={n}", f"train.global_batch_size={2 * n}"], calib_mod.load())
    from bridgebench.launch.plan import prediction_of

    pred = prediction_of(row, "default", source="test")
    return {
        "record_id": f"c/{n}/{i}/{payload}", "run_id": f"{n:012d}-r{i}", "name": f"replay-{n}", "kind": payload,
        "payload": payload, "outcome": "completed", "step_time_s": pred["step_time_s"] * slower, "predicted": pred,
        "provenance": {"logs": [{"sha256": f"{n:064d}"}]}, "num_gpus": n,
    }  # fmt: skip


def test_records_refit_write_and_price_points(tmp_path, monkeypatch):
    monkeypatch.setenv("BRIDGEBENCH_CONFIG_DIR", str(tmp_path))
    recs = [_record(n, 0.9) for n in (64, 128, 256)] + [_record(512, 0.9, payload="pretrain")]
    chosen, notes = cc.select(recs, ["payload=replay"])
    assert len(chosen) == 3 and notes == ["1 record(s) left out: measured (payload=replay given)"]
    assert len(cc.select(recs, [])[0]) == 1  # measured only unless asked
    res = cc.fit(chosen)
    coef = res["posterior"].coefficients()
    shift = coef["level"][0] + coef["group:h100/fp8_cs"][0] + coef["factor:gemm"][0] * 0.8  # mostly GEMM time
    assert -0.106 < shift < -0.03  # towards log(0.9) = -0.105, shrunk towards the published calibration (0)
    assert coef["level"][0] < 0
    assert all(abs(r["error_pct"]) < 5 and r["inside"] for r in res["loo"])
    path = cc.write("mycluster", res, ["payload=replay"])
    assert path == tmp_path / "calibration" / "mycluster.yaml"
    data = yaml.safe_load(path.read_text())
    prov = data["cluster_refit"]["provenance"]
    assert sorted(prov) == ["000000000064", "000000000128", "000000000256"]
    assert prov["000000000064"]["log_sha256"] == ["0" * 62 + "64"]
    assert data["cluster_refit"]["base_sha256"] == calib_mod.sha256("default")
    cal = calib_mod.load("mycluster")  # through $BRIDGEBENCH_CONFIG_DIR/calibration
    row = engine.predict([*POINT, "num_gpus=1024", "train.global_batch_size=2048"], cal)
    assert row.cluster_calibration == "mycluster"
    assert row.step_time_s / row.step_time_model_s == pytest.approx(0.9, abs=0.03)
    assert row.band_pct < row.band_model_pct  # the runs narrowed the band
    post = refit.Posterior.from_mapping(res["posterior"].to_mapping())
    for k, (m, sd) in res["posterior"].coefficients().items():
        assert post.coefficients()[k] == pytest.approx((m, sd))


@pytest.mark.parametrize("name, match", [("default", "published calibration"), ("../x", "plain name"), ("", "plain")])
def test_bad_names_are_refused(name, match):
    with pytest.raises(cc.ClusterCalibrationError, match=match):
        cc.output_path(name)


def test_vs_predicted_rows_and_payload_choice():
    recs = [_record(64, 1.05), _record(64, 1.07, i=1), _record(128, 1.5, payload="pretrain")]
    shown, line = vs_predicted.choose(recs, "measured")
    assert len(shown) == 1 and "2 replayed record(s) left out" in line
    rows = vs_predicted.rows(vs_predicted.choose(recs, "replayed")[0])
    assert len(rows) == 1 and rows[0]["n"] == 2 and rows[0]["error_pct"] == pytest.approx(6, abs=0.01)
    assert rows[0]["inside_band"] is (6 < rows[0]["band_pct"])
    both = vs_predicted.rows(vs_predicted.choose(recs, "all")[0])
    assert {r["payload"] for r in both} == {"replayed", "measured"}
    assert [r["inside_band"] for r in both if r["payload"] == "measured"] == [False]  # +50 %: outside any band here
    with pytest.raises(ValueError):
        vs_predicted.choose(recs, "some")
