"""The host work a MoE layer exposes when its token dispatch waits on the host
(bridgebench.model.steptime.predict.host_exposed), its fit (``host_moe`` on bridgebench.model.steptime.fit.calibrate's
grid) and the GPU release effect that carries a relative's level to a release it was not published at
(bridgebench.model.steptime.release.LevelTable.gpu_effects)."""

from __future__ import annotations

import dataclasses

import pytest

from bridgebench.config.catalog import load_gpu
from bridgebench.config.time_knobs import time_knobs
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import GpuFacts, TimeConfig
from bridgebench.model.steptime.fit import Row, calibrate
from bridgebench.model.steptime.predict import (
    EXPERT_LAUNCH_SHARE,
    GPU_TERMS,
    expert_host_seconds,
    host_exposed,
    host_seconds,
    layer_time,
    predict_time,
)
from bridgebench.model.steptime.release import GroupLevel, LevelTable, release_index

B200 = GpuFacts.from_mapping(load_gpu("b200"))
#: Qwen3 30B-A3B on 8 B200 as NVIDIA's tables print it (EP 8), without a release level (level 1).
QWEN = dict(gpu=B200, peak_key="mxfp8", num_gpus=8, gbs=512, ep=8, etp=1)
HOST = 8e-3
CAL = Calibration(efficiency={("b200", "fp8"): 0.4}, host_moe=HOST)


def test_a_short_moe_layer_waits_on_the_host_a_long_one_hides_it(models):
    spec = models["qwen3_30b_a3b"]
    moe_layers = sum(bool(m) for m in spec.moe_layer_pattern)
    one = TimeConfig.from_flat(**QWEN, mbs=1)
    at_one = predict_time(spec, one, CAL)
    t_gpu = sum(layer_time(spec, one, CAL, "moe").values())
    assert at_one.level == 1.0 and 0 < t_gpu < HOST  # MBS 1: the layer's kernels run shorter than their launches
    assert at_one.terms["overhead"] == pytest.approx(one.num_microbatches * moe_layers * (HOST - t_gpu))
    four = TimeConfig.from_flat(**QWEN, mbs=4)
    t_gpu4 = sum(layer_time(spec, four, CAL, "moe").values())
    expected4 = four.num_microbatches * moe_layers * max(0.0, HOST - t_gpu4)
    assert (
        predict_time(spec, four, CAL).terms["overhead"] == pytest.approx(expected4)
        and expected4 < at_one.terms["overhead"] / 2
    )
    # no host time, or a capacity-padded (token-drop) dispatch with static shapes: nothing waits, the rest unchanged
    for cal, cfg in (
        (dataclasses.replace(CAL, host_moe=0.0), one),
        (CAL, one.with_dims(moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)),
    ):
        b = predict_time(spec, cfg, cal)
        assert b.terms["overhead"] == 0.0 and b.total == pytest.approx(at_one.total - at_one.terms["overhead"])
    # dropping without padding still needs the counts on the host
    dropping = one.with_dims(moe_expert_capacity_factor=1.0)
    assert (
        dropping.host_synced_dispatch
        and predict_time(spec, dropping, CAL).terms["overhead"] == at_one.terms["overhead"]
    )


def test_after_the_sync_the_experts_launches_hide_only_behind_the_experts_own_forward_work():
    """host_exposed's second bound: the per-expert forward launches (EXPERT_LAUNCH_SHARE of the per-expert host
    work) against the experts' forward seconds, however long the rest of the layer is."""
    synced = TimeConfig.from_flat(**QWEN, mbs=1)
    layer = dict.fromkeys(GPU_TERMS, 0.0) | {"compute": 10e-3, "experts_fwd": 1e-3}
    kinds, per_kind = (("moe", 2), ("dense", 1)), {"moe": layer}
    # the whole layer (10 ms) hides the 5 ms of host work, but 9 ms per expert part x 1/3 = 3 ms > 1 ms of experts
    assert EXPERT_LAUNCH_SHARE == pytest.approx(1 / 3)
    assert host_exposed(kinds, per_kind, synced, 5e-3, 1.0, 9e-3) == pytest.approx(2 * (3e-3 - 1e-3))
    assert host_exposed(kinds, per_kind, synced, 5e-3, 2.0, 9e-3) == pytest.approx(2 * (1.5e-3 - 1e-3))  # level 2
    assert host_exposed(kinds, per_kind, synced, 5e-3, 1.0, 3e-3) == 0.0  # 1 ms of launches, 1 ms of experts
    assert host_exposed(kinds, per_kind | {"moe": layer | {"compute": 4e-3}}, synced, 5e-3, 1.0, 0.0) == (
        pytest.approx(2 * 1e-3)  # the first bound alone: 5 ms of host over a 4 ms layer
    )
    padded = synced.with_dims(moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)
    assert host_exposed(kinds, per_kind, padded, 5e-3, 1.0, 9e-3) == 0.0  # static shapes: no sync


def test_a_gpu_with_many_small_experts_waits_inside_a_layer_longer_than_its_host_work(models):
    """Qwen3 30B-A3B at EP 2 (64 experts per GPU) and MBS 4: the layer's GPU time exceeds its 6.4 ms of host work,
    so the first bound exposes nothing; the experts' forward (a quarter of the copies of MBS 16 spread over 64
    experts) is shorter than their 2.1 ms of forward launches, so the layer still waits. At MBS 8 it does not."""
    spec = models["qwen3_30b_a3b"]
    cal = dataclasses.replace(CAL, host_moe=0.0, host_moe_expert=1e-4)
    four = TimeConfig.from_flat(**(QWEN | {"ep": 2}), mbs=4)
    host = host_seconds(spec, four, 0.0, 1e-4)
    assert host == expert_host_seconds(spec, four, 1e-4) == pytest.approx(64 * 1e-4)
    assert sum(layer_time(spec, four, cal, "moe").values()) > host
    assert predict_time(spec, four, cal).terms["overhead"] > 0.0
    assert predict_time(spec, four.with_dims(mbs=8), cal).terms["overhead"] == 0.0


def test_a_dense_model_never_waits_on_the_host(models):
    cfg = TimeConfig.from_flat(gpu=B200, peak_key="fp8", num_gpus=8, mbs=1, gbs=128, tp=8, sequence_parallel=True)
    assert predict_time(models["llama3_70b"], cfg, CAL).terms["overhead"] == 0.0


def test_the_fit_recovers_a_known_host_time(models):
    """Rows predicted with a known host time (level 1 at every release, a different MBS per release) give it back
    from the grid: only the true value leaves the release levels flat when a release is held out."""
    spec = models["qwen3_30b_a3b"]
    rows = []
    for release, mbs_values in (("26.02", (1, 2)), ("26.04", (4, 2))):
        for mbs in mbs_values:
            cfg = TimeConfig.from_flat(**QWEN, mbs=mbs, release=release)
            tflops = predict_time(spec, cfg, CAL).tflops_per_gpu
            rows.append(Row(spec=spec, cfg=cfg, tflops=tflops, release=release))
    cal = calibrate(rows, c_grid=(0.0,), host_grid=(0.0, HOST / 2, HOST, 2 * HOST), expert_grid=(0.0,))
    assert cal.host_moe == HOST
    assert cal.efficiency[("b200", "fp8")] == pytest.approx(0.4, rel=1e-3)  # the fixed point's tolerance
    assert all(abs(y) < 1e-3 for g in cal.groups.values() for y in g.y)


def test_the_host_time_grows_with_the_experts_a_gpu_holds_and_the_fit_recovers_both_parts(models):
    """host = host_moe + host_moe_expert x (experts / EP) (predict.host_seconds: a GEMM launch per local expert);
    rows at EP 2, 4 and 8 (64, 32 and 16 local experts) and two MBS per release give both parts back from the grid."""
    spec = models["qwen3_30b_a3b"]
    truth = dataclasses.replace(CAL, host_moe=2e-3, host_moe_expert=1e-4)
    one = TimeConfig.from_flat(**QWEN, mbs=1)
    assert host_seconds(spec, one, 2e-3, 1e-4) == pytest.approx(2e-3 + 1e-4 * spec.num_moe_experts / 8)
    assert host_seconds(spec, one.with_dims(ep=2), 2e-3, 1e-4) == pytest.approx(2e-3 + 1e-4 * spec.num_moe_experts / 2)
    assert host_seconds(models["llama3_70b"], one, 2e-3, 1e-4) == pytest.approx(2e-3 + 1e-4)  # no experts: one
    rows = []
    for release, mbs_values in (("26.02", (1, 2)), ("26.04", (4, 2))):
        for mbs in mbs_values:
            for ep in (2, 4, 8):
                cfg = TimeConfig.from_flat(**(QWEN | {"ep": ep}), mbs=mbs, release=release)
                rows.append(
                    Row(spec=spec, cfg=cfg, tflops=predict_time(spec, cfg, truth).tflops_per_gpu, release=release)
                )
    cal = calibrate(rows, c_grid=(0.0,), host_grid=(0.0, 2e-3, 4e-3), expert_grid=(0.0, 5e-5, 1e-4, 2e-4))
    assert (cal.host_moe, cal.host_moe_expert) == (2e-3, 1e-4)
    assert Calibration.from_mapping(cal.to_mapping()).host_moe_expert == 1e-4  # written and read back


def test_a_relative_is_carried_by_its_gpus_release_effect():
    """Model b, published on B200 in FP8 at 26.02 only, read at NVFP4 (its same model and GPU tier) at 26.04: its
    26.02 level plus what 26.02 -> 26.04 did to model a on the same GPU; at 26.02 nothing is added, and a group's
    own level beyond its releases stays flat."""
    x0, x1 = release_index("26.02"), release_index("26.04")
    groups = {
        ("a", "b200", "fp8"): GroupLevel(family="moe", x=(x0, x1), y=(0.0, 0.3), rows=2),
        ("b", "b200", "fp8"): GroupLevel(family="moe", x=(x0,), y=(0.1,), rows=1),
    }
    table = LevelTable(groups=groups, family_mean={"moe": 0.0})
    xs, bs = table.gpu_effects["b200"]
    assert xs == (x0, x1) and bs[1] - bs[0] == pytest.approx(0.3, abs=1e-3)
    level, source = table.log_level(("b", "b200", "nvfp4"), "moe", x1)
    assert source == "same model and GPU" and level == pytest.approx(0.4, abs=1e-3)
    assert table.log_level(("b", "b200", "nvfp4"), "moe", x0)[0] == pytest.approx(0.1)
    assert table.log_level(("b", "b200", "fp8"), "moe", x1) == (pytest.approx(0.1), "group")


def test_the_sweep_reads_the_expert_capacity_knobs():
    knobs = time_knobs({"gpu": "b200", "moe_expert_capacity_factor": 1, "moe_pad_expert_input_to_capacity": True})
    assert knobs["moe_expert_capacity_factor"] == 1.0 and knobs["moe_pad_expert_input_to_capacity"] is True
    assert time_knobs({"gpu": "b200"})["moe_expert_capacity_factor"] is None


def test_the_expert_capacity_a_point_runs_with_is_shown_with_the_other_knobs():
    from bridgebench.config.time_knobs import SHOWN_KNOBS, shown_knobs

    assert "expert_capacity" in SHOWN_KNOBS
    assert shown_knobs({}, spec_is_moe=True)["expert_capacity"] == "dropless"
    assert shown_knobs({"moe_expert_capacity_factor": 1.0}, spec_is_moe=True)["expert_capacity"] == "capacity 1"
    padded = {"moe_expert_capacity_factor": 1.25, "moe_pad_expert_input_to_capacity": True}
    assert shown_knobs(padded, spec_is_moe=True)["expert_capacity"] == "capacity 1.25, padded"
    assert shown_knobs(padded, spec_is_moe=False)["expert_capacity"] is None  # a dense model routes nothing


def test_hybridep_with_a_rank_budget_never_waits_on_the_host(models):
    """megatron-core 0.19.2 ``token_dispatcher.py``: with ``moe_expert_rank_capacity_factor`` HybridEP's permuted
    tokens have a static upper bound (no CPU sync in dispatch); without it HybridEP sizes its buffers on the host.
    The budget means nothing to the alltoall dispatcher (Megatron-Core refuses it there), which still waits."""
    spec = models["qwen3_30b_a3b"]
    hybrid = TimeConfig.from_flat(
        **QWEN, mbs=1, moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep"
    )
    waits = predict_time(spec, hybrid, CAL)
    assert hybrid.host_synced_dispatch and waits.terms["overhead"] > 0
    budget = hybrid.with_dims(moe_expert_rank_capacity_factor=1.5)
    free = predict_time(spec, budget, CAL)
    assert not budget.host_synced_dispatch and free.terms["overhead"] == 0.0
    assert free.total == pytest.approx(waits.total - waits.terms["overhead"])
    alltoall = TimeConfig.from_flat(**QWEN, mbs=1, moe_expert_rank_capacity_factor=1.5)
    assert alltoall.host_synced_dispatch
    knobs = time_knobs(
        {"gpu": "gb300", "moe_flex_dispatcher_backend": "hybridep", "moe_expert_rank_capacity_factor": 1.5}
    )
    assert knobs["moe_expert_rank_capacity_factor"] == 1.5 and TimeConfig.from_flat(
        **QWEN, mbs=1, **{k: knobs[k] for k in ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend",
                                                 "moe_expert_rank_capacity_factor")}
    ).host_synced_dispatch is False  # fmt: skip
    from bridgebench.config.time_knobs import shown_knobs

    shown = shown_knobs({"moe_flex_dispatcher_backend": "hybridep", "moe_expert_rank_capacity_factor": 1.5})
    assert shown["expert_capacity"] == "dropless, rank budget 1.5"


def test_a_rank_budget_that_is_not_a_number_is_refused_naming_the_field():
    from bridgebench.config.compose import ConfigError, compose

    with pytest.raises(ConfigError, match="moe_expert_rank_capacity_factor.*Optional\\[float\\]"):
        compose(["recipe=deepseek_v3_gb300_mxfp8", "release=26.08", "model.moe_expert_rank_capacity_factor=abc"])
