"""DeepSpeed ZeRO-3's data-parallel communication in the step-time model (bridgebench.model.steptime.dp_comm): 3 x the
FP16 parameter bytes per microbatch (Rajbhandari et al. 2020, ZeRO, Sec. 7.2.2) in a flat ring over each GPU's own
NIC, exposed; priced only for ``framework="deepspeed"``, from the ablation row's framework column and the sweep's
``framework.name``."""

from __future__ import annotations

import pytest

from bridgebench.config import calibration
from bridgebench.config.catalog import load_gpu
from bridgebench.config.time_knobs import time_knobs
from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime import collectives
from bridgebench.model.steptime.config import GpuFacts, TimeConfig, TimeModelError
from bridgebench.model.steptime.predict import local_params, predict_time, registry
from bridgebench.validation.ablation_time import point_of

A100 = GpuFacts.from_mapping(load_gpu("a100"))
#: GPT-3 175B as Narayanan et al. 2021 Table 2 ran it (96 x 12288, 96 heads, GeLU MLP 4h, sequence 2048)
GPT3 = ModelSpec(name="gpt3_175b_zero3_test", num_layers=96, hidden_size=12288, ffn_hidden_size=49152,
                 num_attention_heads=96, num_query_groups=96, vocab_size=51200, seq_length=2048,
                 gated_linear_unit=False, activation_func="gelu")  # fmt: skip


def _zero3(n: int, mbs: int, framework: str = "deepspeed") -> TimeConfig:
    return TimeConfig.from_flat(gpu=A100, peak_key="bf16", num_gpus=n, mbs=mbs, gbs=1536, use_megatron_fsdp=True,
                                use_distributed_optimizer=False, overlap_grad_reduce=False, overlap_param_gather=False,
                                recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1,
                                framework=framework)  # fmt: skip


@pytest.fixture(scope="module")
def cal():
    return calibration.load().time


def test_zero3_moves_three_times_the_fp16_params_through_each_gpus_nic(cal):
    cfg = _zero3(384, 4)
    (dense, expert), *_ = local_params(registry.handle(GPT3), 1, 1, None, 1, 1, None)
    assert expert == 0 and 1.7e11 < dense < 1.8e11  # 174.6 B params, all on every GPU's stage
    # by hand: 3 rings of 2-byte params over 384 ranks at A100's 25 GB/s NIC x bus efficiency, 383 network steps each
    wire = 3 * (383 / 384 * 2 * dense / (25e9 * collectives.BUS_EFFICIENCY) + 383 * collectives.NETWORK_ALPHA)
    b = predict_time(GPT3, cfg, cal)
    assert b.terms["dp_comm"] == pytest.approx(wire, rel=1e-9)
    assert 50 < b.terms["dp_comm"] < 55  # ~1.05 TB per GPU per step at 20 GB/s


def test_megatron_fsdp_of_the_same_point_is_hierarchical_and_overlapped(cal):
    ds = predict_time(GPT3, _zero3(384, 4), cal)
    mfsdp = predict_time(GPT3, _zero3(384, 4, "megatron"), cal)
    assert mfsdp.terms["dp_comm"] < ds.terms["dp_comm"] / 8  # 8 NICs per node share it, hidden under compute
    assert {k: v for k, v in ds.terms.items() if k != "dp_comm"} == pytest.approx(
        {k: v for k, v in mfsdp.terms.items() if k != "dp_comm"}
    )


def test_doubling_the_gpus_at_fixed_batch_leaves_zero3_communication_bound(cal):
    """Narayanan et al. 2021 Table 2's shape: compute per GPU halves as the GPUs double, ZeRO-3's per-GPU volume
    does not, so TFLOP/s/GPU falls and falls faster than the compute share alone would."""
    steps = [predict_time(GPT3, _zero3(n, mbs), cal) for n, mbs in ((384, 4), (768, 2), (1536, 1))]
    comm = [b.terms["dp_comm"] for b in steps]
    assert max(comm) / min(comm) < 1.01
    tput = [b.tflops_per_gpu for b in steps]
    assert tput[0] > 1.4 * tput[1] > 1.4 * 1.4 * tput[2]


def test_a_group_inside_one_node_rings_over_nvlink(cal):
    eight = TimeConfig.from_flat(gpu=A100, peak_key="bf16", num_gpus=8, mbs=1, gbs=8, use_megatron_fsdp=True,
                                 framework="deepspeed")  # fmt: skip
    (dense, _), *_ = local_params(registry.handle(GPT3), 1, 1, None, 1, 1, None)
    wire = 3 * (7 / 8 * 2 * dense / (300e9 * collectives.BUS_EFFICIENCY) + 7 * collectives.NVLINK_ALPHA)
    assert predict_time(GPT3, eight, cal).terms["dp_comm"] == pytest.approx(wire, rel=1e-9)


def test_framework_comes_from_the_row_and_the_sweep_and_is_validated():
    row = {"num_gpus": "384", "tp": "1", "pp": "1", "cp": "", "ep": "", "etp": "", "vp": "", "mbs": "4",
           "gbs": "1536", "notes": "", "recompute": "", "set_id": "narayanan2021_t2_ptdp_vs_zero3",
           "sequence_parallel": "", "framework": "Megatron-LM codebase + DeepSpeed ZeRO-3 (no model parallelism)",
           "distributed_optimizer": "zero3", "num_experts": "", "precision": "mixed precision",
           "gpu": "A100-SXM-80GB (Selene; NVLink/NVSwitch; 8x200Gb/s HDR IB per node)"}  # fmt: skip
    cfg, _ = point_of(row, A100)
    assert cfg.framework == "deepspeed" and cfg.use_megatron_fsdp
    cfg, _ = point_of({**row, "framework": "Megatron-LM PTD-P", "distributed_optimizer": "", "tp": "8"}, A100)
    assert cfg.framework == "megatron"
    assert time_knobs({"framework": "deepspeed"})["framework"] == "deepspeed"
    assert time_knobs({})["framework"] == "megatron"
    with pytest.raises(TimeModelError, match="framework must be one of"):
        _zero3(384, 4, "colossalai")
