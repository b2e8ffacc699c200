"""A sweep space may be a list of points (``points:`` in ``configs/sweep/<name>.yaml``): exactly those
configurations are enumerated, each over the base of its group values, and bad lists are refused by rule."""

from __future__ import annotations

import pytest

from bridgebench import sweep as engine


def _write(tmp_path, monkeypatch, text: str) -> None:
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "mine.yaml").write_text(text)
    monkeypatch.setenv("BRIDGEBENCH_CONFIG_DIR", str(tmp_path))


def test_points_enumerate_exactly_the_listed_configurations():
    sp = engine.parse_space([], "replay_llama3_70b_h100")
    assert sp.size == 12 and sp.points is not None
    bases = engine.compose_bases(sp)
    assert len(bases) == 2  # one compose per precision the points use, not per product of axes
    rows = engine.check_rules(engine.enumerate_points(sp, bases), bases)
    got = sorted((r["precision"], r["num_gpus"], r["gbs"]) for r in rows)
    want = sorted((p, n, 2 * n) for p in ("bf16", "fp8_cs") for n in (64, 128, 256, 512, 1024, 2048))
    assert got == want
    assert {r["status"] for r in rows} == {"valid"}
    assert {(r["tp"], r["pp"], r["vp"], r["cp"]) for r in rows} == {(4, 4, 5, 2)}
    other = engine.parse_space(["train.micro_batch_size=2"], "replay_llama3_70b_h100")
    assert other.fingerprint() != sp.fingerprint()  # the resumable sweep's identity covers the points


@pytest.mark.parametrize(
    "text, overrides, match",
    [
        ("points: []\n", [], "sweep_points"),
        ("points: [3]\n", [], "sweep_points"),
        ("points:\n  - {train.micro_batch_size: 1}\n  - {train.micro_batch_size: 1}\n", [], "repeats point 1"),
        (
            "space: {train.micro_batch_size: [1, 2]}\npoints:\n  - {train.micro_batch_size: 1}\n",
            [],
            "sweep_points_or_axes",
        ),
        ("points:\n  - {train.micro_batch_size: 1}\n", ["train.micro_batch_size=1,2"], "sweep_points_or_axes"),
        ("points:\n  - {train.micro_batch_size: 0}\n", [], "positive_int"),
    ],
)
def test_bad_point_lists_are_refused(tmp_path, monkeypatch, text, overrides, match):
    _write(tmp_path, monkeypatch, "overrides: [recipe=qwen3_30b_a3b_gb300_mxfp8]\n" + text)
    with pytest.raises(engine.SweepError, match=match):
        engine.compose_bases(engine.parse_space(overrides, "mine"))
