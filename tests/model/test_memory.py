"""bridgebench.model.memory: byte model per term, pipeline schedules, Muon's layer-wise state, and the measured golden
values of Megatron-LM's functional tests (static memory, exact enough to test)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from bridgebench.config import calibration
from bridgebench.model.memory import (
    MemoryConfig,
    MemoryModelError,
    dist_muon_state_by_rank,
    estimate_memory,
    inflight_microbatches,
    parameter_counts,
    ping_pong_loads,
    ping_pong_runs,
    stage_chunks,
)
from bridgebench.model.spec import ModelSpec
from bridgebench.validation.golden import golden_cases, golden_memory_config, golden_spec

LLAMA3_8B = ModelSpec(
    name="llama3_8b", num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
    num_query_groups=8, kv_channels=128, vocab_size=128256, seq_length=8192,
)  # fmt: skip


def test_adam_without_distributed_optimizer_is_18_bytes_per_param():
    b = estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(num_gpus=1, mbs=1, gbs=1, use_distributed_optimizer=False))
    n = b.weights / 2
    assert n == sum(parameter_counts(LLAMA3_8B, MemoryConfig.from_flat(num_gpus=1, mbs=1, gbs=1))[0])
    assert 8.0e9 < n < 8.1e9  # Llama 3 8B: 8.03 B parameters
    assert b.model_state == pytest.approx(18 * n)  # 2 + 4 + 12 [MLM]


def test_distributed_optimizer_shards_adam_state_over_dp_times_cp():
    sharded = estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(num_gpus=8, mbs=1, gbs=8, cp=2))
    whole = estimate_memory(
        LLAMA3_8B, MemoryConfig.from_flat(num_gpus=8, mbs=1, gbs=8, cp=2, use_distributed_optimizer=False)
    )
    assert sharded.optimizer_state == pytest.approx(whole.optimizer_state / 8)


def test_grad_precision_and_mxfp8_weight_copies():
    base = dict(num_gpus=8, mbs=1, gbs=8)
    fp32 = estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(**base))
    bf16 = estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(**base, grad_reduce_in_fp32=False))
    assert bf16.grads == pytest.approx(fp32.grads / 2)
    mx = estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(**base, precision="mxfp8"))
    gathered = estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(**base, precision="mxfp8", fp8_param_gather=True))
    assert fp32.weights < gathered.weights < mx.weights
    assert mx.activations < fp32.activations  # GEMM inputs saved in 1 + 1/32 B instead of 2


def test_muon_keeps_one_momentum_per_matrix():
    case = next(c for c in golden_cases() if c.short == "muon" and c.hardware == "dgx_h100")
    spec, cfg = golden_spec(case.args), golden_memory_config(case)
    muon = estimate_memory(spec, cfg)
    adam = estimate_memory(spec, dataclasses.replace(cfg, optimizer="adam", use_distributed_optimizer=False))
    assert muon.optimizer_state < adam.optimizer_state
    # Muon matrices 8 B (master + momentum) instead of 12 B: the difference is 4 B per Muon-matrix element
    assert adam.optimizer_state - muon.optimizer_state == pytest.approx(
        4 * (adam.weights / 2 - _adam_side(spec)), rel=1e-9
    )


def _adam_side(spec: ModelSpec) -> int:
    """Elements of the golden model that Muon leaves to Adam: norms (weight + bias), embeddings."""
    h, layers = spec.hidden_size, spec.num_layers
    vpad = spec.padded_vocab_size(1)
    return layers * 4 * h + 2 * h + vpad * h + spec.extra["max_position_embeddings"] * h


@pytest.mark.parametrize("case", golden_cases(), ids=lambda c: f"{c.short}-{c.hardware}")
def test_golden_static_memory(case):
    """Weights + grads + optimizer state + the calibrated constant vs the measured ``mem-allocated-bytes`` (median over
    steps) of Megatron-LM's golden values: within 2.5 % on H100 and GB200. Megatron logs memory from the last rank,
    so legacy dist_muon is compared on that rank's ping-pong share. The A100 Adam file (older, sampled every 5 steps)
    is 21 % lower than its H100 / GB200 twins for the same config: not a model error, excluded."""
    if case.gpu == "a100":
        pytest.skip("A100 golden file: 146 MB less allocated than its H100/GB200 twins for the same run")
    other = calibration.load().other_bytes
    spec, cfg = golden_spec(case.args), golden_memory_config(case, other)
    b = estimate_memory(spec, cfg)
    static = b.model_state + b.other
    if cfg.optimizer == "dist_muon" and not cfg.use_distributed_optimizer:
        static += dist_muon_state_by_rank(spec, cfg)[-1] - b.optimizer_state
    assert static == pytest.approx(case.mem_allocated, rel=0.025)
    assert b.total == pytest.approx(case.mem_max_allocated, rel=0.15)  # peaks: within 15 % (5-12 % under)


def test_legacy_dist_muon_logging_rank_is_not_the_busiest_on_four_gpus():
    case = next(c for c in golden_cases() if c.short == "dist_muon_1node")
    spec, cfg = golden_spec(case.args), golden_memory_config(case)
    per_rank = dist_muon_state_by_rank(spec, cfg)
    assert max(per_rank) == pytest.approx(estimate_memory(spec, cfg).optimizer_state)
    assert per_rank[-1] < max(per_rank)  # the embedding (largest param) is dealt to rank 0, logging is on rank 3


def test_ping_pong_order_is_megatron_cores():
    # megatron-core 0.19.2 layer_wise_optimizer.py docstring: 4 ranks, 10 params ->
    # [[p0, p7, p8], [p1, p6, p9], [p2, p5], [p3, p4]]
    items = [(i + 1, 1.0) for i in range(10)]
    assert ping_pong_loads(items, 4) == [1 + 8 + 9, 2 + 7 + 10, 3 + 6, 4 + 5]


def test_ping_pong_runs_equal_dealing_one_by_one():
    rng = random.Random(7)
    for _ in range(200):
        runs = [
            (rng.choice([3, 5, 8, 13]), rng.choice([8.0, 12.0]), rng.randint(1, 40)) for _ in range(rng.randint(1, 8))
        ]
        group = rng.randint(1, 9)
        expanded = [(n, b) for n, b, c in runs for _ in range(c)]
        assert ping_pong_runs(runs, group) == pytest.approx(ping_pong_loads(expanded, group))


def test_inflight_microbatches():
    assert [inflight_microbatches(4, r, 0, None, 100) for r in range(4)] == [4, 3, 2, 1]
    assert inflight_microbatches(4, 0, 0, None, 2) == 2  # fewer microbatches than stages
    p, v = 4, 3  # interleaved rank 0 over its chunks: p v (1 + (p - 1)/(p v)) chunk-microbatches [MLM]
    assert sum(inflight_microbatches(p, 0, c, v, 100) for c in range(v)) == p * v + p - 1


def test_recompute_lowers_activations(models):
    spec = models["qwen3_30b_a3b"]
    kw = dict(num_gpus=8, mbs=8, gbs=512, ep=8)
    none = estimate_memory(spec, MemoryConfig.from_flat(**kw))
    act = estimate_memory(
        spec, MemoryConfig.from_flat(**kw, recompute_granularity="selective", recompute_modules=("moe_act",))
    )
    moe = estimate_memory(
        spec, MemoryConfig.from_flat(**kw, recompute_granularity="selective", recompute_modules=("moe",))
    )
    full = estimate_memory(spec, MemoryConfig.from_flat(**kw, recompute_granularity="full", recompute_method="uniform"))
    block = estimate_memory(
        spec,
        MemoryConfig.from_flat(**kw, recompute_granularity="full", recompute_method="block", recompute_num_layers=24),
    )
    assert full.activations < moe.activations < act.activations < none.activations
    assert full.activations < block.activations < none.activations


def test_kimi_layout_puts_embedding_and_loss_on_the_right_ranks(models):
    spec = models["kimi_k2"]
    layout = "Et*4|(t*4|)*14tL"
    ranks = stage_chunks(spec.num_layers, spec.mtp_layers, 4, 4, layout)
    assert [len(r) for r in ranks] == [4, 4, 4, 4]
    assert ranks[0][0][1] and not any(ch[1] for r in ranks[1:] for ch in r)
    assert ranks[3][3] == ((60,), False, True)
    assert sum(len(ch[0]) for r in ranks for ch in r) == 61
    b = estimate_memory(
        spec,
        MemoryConfig.from_flat(
            num_gpus=256, mbs=2, gbs=4096, pp=4, vp=4, ep=64, etp=1, pipeline_model_parallel_layout=layout,
            optimizer="dist_muon", use_distributed_optimizer=False, precision="mxfp8", grad_reduce_in_fp32=False,
            recompute_granularity="selective", recompute_modules=("mla_up_proj",),
        ),
    )  # fmt: skip
    assert len(b.per_stage) == 4 and b.stage == 0  # rank 0 holds the most in-flight microbatches
    assert 100e9 < b.total < 288e9 * 0.9  # the published run fits GB300's 288 GB


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(num_gpus=6, mbs=1, gbs=8, tp=4), "world size 6"),
        (dict(num_gpus=8, mbs=1, gbs=8, ep=2), "num_moe_experts"),
        (dict(num_gpus=8, mbs=1, gbs=8, optimizer="sgd"), "unknown optimizer"),
        (dict(num_gpus=8, mbs=0, gbs=8), "mbs must be a positive integer"),
        (dict(num_gpus=8, mbs=1, gbs=8, precision="fp4"), "unknown precision"),
        (dict(num_gpus=8, mbs=1, gbs=8, recompute_granularity="some"), "recompute_granularity"),
    ],
)
def test_bad_points_raise_naming_the_rule(kw, match):
    with pytest.raises(MemoryModelError, match=match):
        estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(**kw))


# ---------------------------------------------------------------------------------------------------- issue 15
LLAMA405 = ModelSpec(
    name="llama31_405b_t", num_layers=126, hidden_size=16384, ffn_hidden_size=53248, num_attention_heads=128,
    num_query_groups=8, kv_channels=128, vocab_size=128256, seq_length=8192,
)  # fmt: skip


def test_megatron_core_splits_embedding_and_loss_as_layers():
    """account_for_embedding/loss: (126 + 2) / 8 = 16 per rank, 4 per virtual stage; rank 0 builds 15 (its first
    chunk 3), the last rank 15 (its last chunk 3) -- megatron-core 0.19.2 get_num_layers_to_build."""
    ranks = stage_chunks(126, 0, 8, 4, None, account_for_embedding=True, account_for_loss=True)
    per_rank = [sum(len(ch[0]) for ch in r) for r in ranks]
    assert per_rank == [15] + [16] * 6 + [15]
    assert [len(ch[0]) for ch in ranks[0]] == [3, 4, 4, 4] and ranks[0][0][1] and ranks[7][3][2]
    assert sorted(li for r in ranks for ch in r for li in ch[0]) == list(range(126))
    uneven = stage_chunks(61, 0, 4, None, None, first_stage_layers=13, last_stage_layers=12)
    assert [len(r[0][0]) for r in uneven] == [13, 18, 18, 12]


def test_fsdp_shards_the_model_state_and_keeps_two_gathered_units():
    kw = dict(num_gpus=64, mbs=1, gbs=64, grad_reduce_in_fp32=False)
    ddp = estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(**kw))
    fsdp = estimate_memory(
        LLAMA3_8B,
        MemoryConfig.from_flat(**kw, use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params"),
    )
    layer = (
        sum(n for n, _ in parameter_counts(LLAMA3_8B, MemoryConfig.from_flat(**kw))[:1]) // 32
    )  # ~ one layer (bound)
    assert fsdp.weights < ddp.weights / 4 and fsdp.grads < ddp.grads / 4
    assert fsdp.weights > 2 * 2.0 * layer * 0.5  # two gathered bf16 units (a layer, or the larger embedding)
    assert fsdp.optimizer_state == pytest.approx(ddp.optimizer_state)  # both shard Adam over DP x CP
    optim = estimate_memory(
        LLAMA3_8B, MemoryConfig.from_flat(**kw, use_megatron_fsdp=True, data_parallel_sharding_strategy="optim")
    )
    assert optim.weights == pytest.approx(ddp.weights) and optim.grads == pytest.approx(ddp.grads)


def test_activation_offloading_keeps_the_other_layers_and_fine_grained_drops_module_inputs():
    kw = dict(num_gpus=8, mbs=1, gbs=8)
    base = estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(**kw))
    off = estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(**kw, cpu_offloading=True, cpu_offloading_num_layers=8))
    # TE cpu_offload: layers 0..N-1 offloaded, the peak holds the other L - N layers' activations
    layers_part = base.activations - (8.0 + 2.0 * 4096) * 8192  # without the embedding input / output
    assert off.activations == pytest.approx(base.activations - layers_part * 8 / 32, rel=1e-6)
    fine = estimate_memory(
        LLAMA3_8B,
        MemoryConfig.from_flat(
            **kw, fine_grained_activation_offloading=True, offload_modules=("core_attn", "attn_proj")
        ),
    )
    assert fine.activations < base.activations
    with pytest.raises(MemoryModelError, match="offload_modules"):
        estimate_memory(
            LLAMA3_8B, MemoryConfig.from_flat(**kw, fine_grained_activation_offloading=True, offload_modules=("x",))
        )


def test_precision_aware_optimizer_and_optimizer_offload():
    kw = dict(num_gpus=8, mbs=1, gbs=8, use_distributed_optimizer=False)
    fp32 = estimate_memory(LLAMA3_8B, MemoryConfig.from_flat(**kw))
    bf16 = estimate_memory(
        LLAMA3_8B,
        MemoryConfig.from_flat(**kw, use_precision_aware_optimizer=True, exp_avg_dtype="torch.bfloat16",
                     exp_avg_sq_dtype="torch.bfloat16", main_params_dtype="torch.float32"),
    )  # fmt: skip
    assert bf16.optimizer_state == pytest.approx(fp32.optimizer_state * 8 / 12)
    half = estimate_memory(
        LLAMA3_8B, MemoryConfig.from_flat(**kw, optimizer_cpu_offload=True, optimizer_offload_fraction=0.5)
    )
    assert half.optimizer_state == pytest.approx(fp32.optimizer_state / 2)
