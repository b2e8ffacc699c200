"""bridgebench.model.parallel: one ParallelDims value -- its derived sizes, its checks (the rules' ids and messages),
the one constructor from a row, and the values that hold it (rules, memory, time, Newton-Schulz, plan)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bridgebench.config import rules
from bridgebench.config.catalog import load_gpu
from bridgebench.model.memory import MemoryConfig
from bridgebench.model.newton_schulz import NSError, Parallelism
from bridgebench.model.parallel import DIM_FIELDS, ParallelDims, ParallelDimsError
from bridgebench.model.steptime.config import GpuFacts, TimeConfig

H100 = GpuFacts.from_mapping(load_gpu("h100"))
KIMI = ParallelDims(num_gpus=256, tp=1, pp=4, vp=4, ep=64, etp=1, mbs=2, gbs=4096)


def test_derived_sizes_follow_megatron_cores_groups():
    # Kimi K2 on 256 GB300 (blog): DP = 256 / (1 x 4 x 1) = 64, EDP = 256 / (1 x 64 x 4) = 1, M = 4096 / (2 x 64)
    assert (KIMI.dp, KIMI.edp, KIMI.dp_cp, KIMI.num_microbatches) == (64, 1, 64, 32)
    assert KIMI.etp_ == 1 and KIMI.model_size == 4 and KIMI.expert_grid == 256
    cp = ParallelDims(num_gpus=64, tp=2, pp=2, cp=4, ep=4, gbs=64)
    assert (cp.dp, cp.dp_cp, cp.etp_, cp.edp) == (4, 16, 2, 4)  # ETP unset = TP; experts do not use CP
    assert KIMI.domains(72) == 4 and KIMI.domains(8) == 32 and KIMI.expert_group_span() == 64


def test_nothing_is_checked_on_construction_and_every_problem_is_named():
    bad = ParallelDims(num_gpus=96, tp=4, pp=4, cp=4, ep=8, gbs=100)
    assert [r for r, _ in bad.problems()] == ["world_size", "expert_grid"]
    with pytest.raises(ParallelDimsError, match="world_size: world size 96 is not divisible by TP x PP x CP"):
        bad.validate()
    sizes = ParallelDims(num_gpus=8, tp=0, vp=2.0, gbs=8)
    assert sizes.problems() == [
        ("positive_int", "tp must be a positive integer, got 0"),
        ("positive_int", "vp must be a positive integer or None, got 2.0"),
    ]
    batch = ParallelDims(num_gpus=8, mbs=1, gbs=10, pp=2, vp=2)
    assert batch.problems() == [("gbs_divisible", "global batch size 10 is not divisible by MBS x DP = 1 x 4 = 4")]
    interleaved = batch.replace(gbs=12)  # 3 microbatches, not a multiple of PP 2
    assert [r for r, _ in interleaved.problems()] == ["microbatches_interleaved"]
    assert batch.replace(gbs=16).problems() == [] and batch.replace(gbs=12, vp=None).problems() == []
    assert KIMI.validate() is KIMI


def test_the_rules_report_the_same_messages_as_the_value():
    base = dict(num_layers=48, num_attention_heads=32, seq_length=4096)
    for dims in (ParallelDims(num_gpus=96, tp=4, pp=4, cp=4, ep=1, gbs=96), ParallelDims(num_gpus=24, ep=8, gbs=48)):
        ours = {(v.rule, v.message) for v in rules.check(rules.Point(dims=dims, **base))}
        assert set(dims.problems()) <= ours


def test_one_constructor_from_a_row_short_or_megatron_names():
    row = {"num_gpus": 256, "tp": 1, "pp": 4, "vp": 4, "ep": 64, "etp": 1, "mbs": 2, "gbs": 4096, "model": "kimi"}
    assert ParallelDims.from_row(row) == KIMI
    megatron = {
        "num_gpus": 256, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 4,
        "virtual_pipeline_model_parallel_size": 4, "expert_model_parallel_size": 64, "expert_tensor_parallel_size": 1,
        "micro_batch_size": 2, "global_batch_size": 4096,
    }  # fmt: skip
    assert ParallelDims.from_row(megatron) == KIMI
    with pytest.raises(ParallelDimsError, match="num_gpus is required"):
        ParallelDims.from_row({"tp": 2})
    # values are kept as given (numpy ints from a parquet row included): the checks judge them
    assert ParallelDims.from_row({"num_gpus": np.int64(8), "gbs": 8}).problems() == []


def test_every_holder_keeps_one_dims_field():
    gpu = H100
    holders = [
        rules.Point(dims=KIMI, num_layers=61, num_attention_heads=64, seq_length=4096),
        MemoryConfig(dims=KIMI),
        TimeConfig(gpu=gpu, peak_key="bf16", dims=KIMI),
        Parallelism(dims=KIMI),
    ]
    for h in holders:
        names = {f.name for f in dataclasses.fields(h)}
        assert "dims" in names and not names & set(DIM_FIELDS), type(h).__name__
        assert (h.tp, h.pp, h.vp, h.ep, h.etp, h.dp, h.edp) == (1, 4, 4, 64, 1, 64, 1)
    assert MemoryConfig.from_flat(num_gpus=256, pp=4, vp=4, ep=64, etp=1, mbs=2, gbs=4096).dims == KIMI
    moved = holders[1].with_dims(tp=2, optimizer="muon")
    assert moved.dims == KIMI.replace(tp=2) and moved.optimizer == "muon"
    assert holders[0].replace(gbs=8).dims.gbs == 8  # rules.Point.replace routes sizes to dims


def test_newton_schulz_raises_its_own_error_naming_the_grid():
    with pytest.raises(NSError, match="TP x PP x CP"):
        _ = Parallelism.from_flat(num_gpus=6, pipeline_model_parallel_size=4).dp
    with pytest.raises(NSError, match="ETP x EP x PP"):
        _ = Parallelism.from_flat(num_gpus=4, expert_model_parallel_size=3).expert_dp
    # the time model hands the NS model its sizes without the batch, so per-rank loads are shared across batches
    gpu = H100
    a = TimeConfig(gpu=gpu, peak_key="bf16", dims=KIMI).parallelism()
    b = TimeConfig(gpu=gpu, peak_key="bf16", dims=KIMI.replace(gbs=8192, mbs=1)).parallelism()
    assert a == b and a.dims.gbs is None
