"""bridgebench.model.memory against Megatron-Bridge 0.6.2's own estimator
(``training/utils/theoretical_memory_utils.py``, ``estimate_training_memory``) on real ConfigContainers built from
bridgebench configs (the sweep's own path: compose -> effective values -> MemoryConfig).

Comparable where both model the same thing: AdamW with the distributed optimizer, BF16 (MB adds no quantized weight
copies), fp32 gradient reduction (MB's 6 B = 2 B bf16 weight + 4 B fp32 grad), selective recompute with sequence
parallelism (the only activation setting MB models), GQA attention (MB counts MLA as GQA). Where they differ, each
difference is named and checked:

1. Norms: MB counts ``4 h`` norm parameters per layer and ``2 h`` for the final norm (LayerNorm weight + bias); Llama
   and Qwen3 use RMSNorm (``h`` per norm), which bridgebench counts.
2. The MoE router (``E x h`` per MoE layer, a real parameter) is not counted by MB.
3. With TP > 1, MB divides replicated parameters (norms, router) by TP; Megatron-Core keeps them whole on every TP
   rank, as bridgebench does. With PP > 1, MB takes the mean stage plus the embedding; bridgebench the busiest
   actual stage. Both are small: model state within 0.1 % (dense) and 3 % (MoE).
4. MoE activations: MB's ``s b h (18 + 4 (k f_e + f_s) / h)`` per layer stores no dispatched token: each token's ``k``
   routed copies (the grouped GEMM's input, kept for its weight gradient) are bridgebench's largest MoE term. Without
   that term the totals agree within 5 %.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from bridgebench import sweep as engine
from bridgebench.config import calibration
from bridgebench.model.memory import estimate_memory, parameter_counts

pytestmark = pytest.mark.megatron

COMMON = [  # ++: set whether or not the config has the field (Megatron-Bridge sections are open maps)
    "optimizer=adamw",
    "precision=bf16",
    "++ddp.grad_reduce_in_fp32=true",
    "++mixed_precision.grad_reduce_in_fp32=true",
    "++model.recompute_granularity=selective",
    "++model.recompute_modules=[core_attn]",
    "++model.recompute_method=null",  # Qwen3 30B-A3B's base recipe recomputes full layers (uniform, 1)
    "++model.recompute_num_layers=null",
]
LLAMA_TP1 = ["model=llama3_70b", "num_gpus=64", "train.global_batch_size=128"]
LLAMA_TP4_PP4 = LLAMA_TP1 + [
    "model.tensor_model_parallel_size=4",
    "model.pipeline_model_parallel_size=4",
    "model.virtual_pipeline_model_parallel_size=5",
    "model.sequence_parallel=true",
]
QWEN_EP8 = ["model=qwen3_30b_a3b", "num_gpus=8", "model.expert_model_parallel_size=8", "train.global_batch_size=512"]
QWEN_TP2_PP2 = [
    "model=qwen3_30b_a3b",
    "num_gpus=16",
    "model.tensor_model_parallel_size=2",
    "model.pipeline_model_parallel_size=2",
    "model.expert_model_parallel_size=8",
    "model.expert_tensor_parallel_size=1",
    "model.sequence_parallel=true",
    "train.global_batch_size=1024",
]
QWEN235_TP4_PP2 = [
    "model=qwen3_235b_a22b",
    "num_gpus=256",
    "model.tensor_model_parallel_size=4",
    "model.pipeline_model_parallel_size=2",
    "model.expert_model_parallel_size=16",
    "model.expert_tensor_parallel_size=2",
    "model.sequence_parallel=true",
    "train.global_batch_size=2048",
]


@pytest.fixture(scope="module")
def compare():
    warnings.filterwarnings("ignore")
    from bridgebench.mbridge import setup
    from bridgebench.mbridge.build import build

    setup()
    from megatron.bridge.training.utils.theoretical_memory_utils import estimate_training_memory

    calib = dataclasses.replace(calibration.load(), other_bytes=0.0)  # MB has no constant term

    def run(overrides):
        base = engine.base_of(overrides + COMMON)
        container = build(base.cfg).container
        if getattr(container, "data_parallel_size", None) is None:
            container.data_parallel_size = container.get_data_parallel_size(int(base.cfg.num_gpus))
        cfg = engine.memory_config(engine.effective(base, {}), calib)
        mb = estimate_training_memory(container, num_microbatches=cfg.num_microbatches)
        return base.spec, cfg, mb, estimate_memory(base.spec, cfg)

    return run


def _mb_params(mb) -> dict[str, float]:
    return {c.name.split()[0]: c.parameter_count_per_gpu for c in mb.model_state_components}


def test_dense_tp1_parameters_equal_after_the_norm_convention(compare):
    spec, cfg, mb, ours = compare(LLAMA_TP1)
    ((dense, experts),) = parameter_counts(spec, cfg)
    h, layers = spec.hidden_size, spec.num_layers
    assert _mb_params(mb)["dense"] == dense + layers * 2 * h + h  # difference 1: MB counts 4h + 2h, RMSNorm is 2h + h
    assert ours.model_state == pytest.approx(mb.weight_and_optimizer_bytes, rel=1e-4)


def test_moe_tp1_parameters_equal_after_the_router_and_norms(compare):
    spec, cfg, mb, ours = compare(QWEN_EP8)
    ((dense, experts),) = parameter_counts(spec, cfg)
    h, layers = spec.hidden_size, spec.num_layers
    router = layers * spec.num_moe_experts * h  # difference 2
    assert _mb_params(mb)["dense"] == dense - router + layers * 2 * h + h  # and difference 1
    assert _mb_params(mb)["routed"] == experts
    assert ours.model_state == pytest.approx(mb.weight_and_optimizer_bytes, rel=0.005)


@pytest.mark.parametrize("case, tol", [(LLAMA_TP4_PP4, 0.001), (QWEN_TP2_PP2, 0.03), (QWEN235_TP4_PP2, 0.03)])
def test_model_state_with_tp_and_pp(compare, case, tol):
    _, _, mb, ours = compare(case)
    assert ours.model_state == pytest.approx(mb.weight_and_optimizer_bytes, rel=tol)  # difference 3


@pytest.mark.parametrize("case", [LLAMA_TP1, LLAMA_TP4_PP4])
def test_dense_totals_within_5_percent(compare, case):
    _, _, mb, ours = compare(case)
    assert ours.total == pytest.approx(mb.total_memory_bytes, rel=0.05)


def test_moe_totals_differ_by_the_dispatched_tokens(compare):
    spec, cfg, mb, ours = compare(QWEN_EP8)
    tokens = cfg.seq_length * cfg.mbs / cfg.cp
    moe_layers = sum(spec.moe_layer_pattern)
    dispatched = spec.moe_router_topk * 2.0 * spec.hidden_size * tokens * moe_layers  # difference 4 (bf16 copies)
    assert ours.total > mb.total_memory_bytes * 1.08
    assert ours.total - dispatched == pytest.approx(mb.total_memory_bytes, rel=0.05)
    for case in (QWEN_TP2_PP2, QWEN235_TP4_PP2):
        _, _, mb, ours = compare(case)
        assert ours.total > mb.total_memory_bytes
