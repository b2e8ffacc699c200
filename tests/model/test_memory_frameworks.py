"""bridgebench.model.memory with ``framework="torchtitan"`` / ``"deepspeed"``: the semantics the published ablation runs
of those frameworks used (torchtitan@9dec370's op-level selective activation checkpointing and FSDP2; DeepSpeed
ZeRO-3's per-tensor gathering), exact byte counts where the sources fix them, and oversized points still refused."""

from __future__ import annotations

import pytest

from bridgebench.model.memory import MemoryConfig, MemoryModelError, estimate_memory, parameter_counts
from bridgebench.model.spec import ModelSpec

LLAMA31_8B = ModelSpec(
    name="llama31_8b_t", num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
    num_query_groups=8, kv_channels=128, vocab_size=128256, seq_length=8192,
)  # fmt: skip
#: GPT 530B of arXiv 2104.04473 Table 2 (GELU MLP 4h, MHA, vocab 51200)
GPT530B = ModelSpec(
    name="gpt_530b_t", num_layers=105, hidden_size=20480, ffn_hidden_size=81920, num_attention_heads=128,
    num_query_groups=128, vocab_size=51200, seq_length=2048, gated_linear_unit=False, activation_func="gelu",
)  # fmt: skip
GB = 1e9


def _titan(**kw) -> MemoryConfig:
    base = dict(num_gpus=8, mbs=2, gbs=16, use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params",
                framework="torchtitan", grad_reduce_in_fp32=True)  # fmt: skip
    return MemoryConfig.from_flat(**(base | kw))


def test_torchtitan_op_sac_keeps_every_other_matmul_output():
    """Per layer and token (Llama 3.1 8B, TP 1): block input 2h, wq 2nd, wv 2gd, flash output 2nd + fp32 LSE 4n,
    w1 2f, w2 2h (mm 1, 3, 5, 7 of wq wk wv wo w1 w3 w2) = 63,616 B -- the recomputed block's full set comes on
    top once; every other term is the same as without recompute."""
    h, f, n, d, g = 4096, 14336, 32, 128, 8
    per_token = 2 * h + 2 * n * d + 2 * g * d + 2 * n * d + 4 * n + 2 * f + 2 * h
    assert per_token == 63_616
    none = estimate_memory(LLAMA31_8B, _titan())
    sac = estimate_memory(LLAMA31_8B, _titan(recompute_granularity="selective"))
    tokens = 2 * 8192
    embedding = (8.0 + 2.0 * h) * tokens
    full_set = (none.activations - embedding) / 32  # one layer without recompute
    assert sac.activations == pytest.approx(embedding + 32 * per_token * tokens + full_set, rel=1e-9)
    assert sac.activations < none.activations / 2
    # Megatron-Core's selective default (core_attn) keeps far more: what refused torchtitan's runs before
    megatron = estimate_memory(LLAMA31_8B, _titan(recompute_granularity="selective", framework="megatron"))
    assert megatron.activations > 1.8 * sac.activations


def test_torchtitan_fsdp2_state_and_loss():
    """FSDP2 over fp32 shards: 4 B parameter + 4 B gradient + 8 B AdamW moments per sharded parameter; gathered
    bf16: the root group (embedding + output) and two blocks; unsharded: the output layer's bf16 gradient (reduced
    with the root after the whole backward) and one block's bf16 gradient plus its fp32 reduce-scatter copy; the
    loss holds bf16 logits, their fp32 copy and the fp32 log-softmax (10 B)."""
    cfg = _titan()
    b = estimate_memory(LLAMA31_8B, cfg)
    n = sum(parameter_counts(LLAMA31_8B, cfg)[0])
    vh = 128256 * 4096  # the (untied) embedding and output
    h, f, g, d = 4096, 14336, 8, 128
    block = h * (h + 2 * g * d) + h * h + 3 * f * h + 2 * h  # qkv, proj, SwiGLU fc1 + fc2, two RMSNorm weights
    assert n == 32 * block + 2 * vh + h
    assert b.weights == pytest.approx(4 * n / 8 + 2 * (2 * vh + 2 * block))
    assert b.grads == pytest.approx(4 * n / 8 + 2 * vh + 6 * block)
    assert b.optimizer_state == pytest.approx(8 * n / 8)
    assert b.logits == pytest.approx(2 * 8192 * 128256 * 10 + 2 * 4096 * 2 * 8192)
    # under pipeline parallelism FSDP2 does not reshard after forward: the stage's whole bf16 copy stays gathered
    pp = estimate_memory(LLAMA31_8B, _titan(num_gpus=16, pp=2, gbs=32))
    stage = parameter_counts(LLAMA31_8B, _titan(num_gpus=16, pp=2, gbs=32))[pp.stage]
    assert pp.weights == pytest.approx(4 * sum(stage) / 8 + 2 * sum(stage))


def test_torchtitan_op_sac_is_dense_only_and_frameworks_are_named():
    moe = ModelSpec(name="moe_t", num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
                    num_query_groups=8, vocab_size=32000, seq_length=1024, num_moe_experts=8, moe_router_topk=2,
                    moe_ffn_hidden_size=1024)  # fmt: skip
    with pytest.raises(MemoryModelError, match="dense GQA/MHA layers only"):
        estimate_memory(moe, _titan(recompute_granularity="selective"))
    with pytest.raises(MemoryModelError, match="framework must be one of"):
        estimate_memory(LLAMA31_8B, MemoryConfig.from_flat(num_gpus=8, mbs=1, gbs=8, framework="jax"))


def test_deepspeed_zero3_gathers_one_tensor_not_two_layers():
    """GPT 530B, ZeRO-3 on 640 A100, MBS 4, full recompute (arXiv 2104.04473 Table 2, which ran): DeepSpeed gathers
    the fc1 / fc2 matrix (4h x h = 1.68 B parameters) whole -- above the 1e9 live-parameter cap, so nothing more is
    prefetched -- and holds unsharded fp16 gradients of at most one 5e8 reduce bucket plus that matrix; the layer-unit
    model (Megatron-FSDP) holds two whole 5 B-parameter layers and one layer's gradient and refuses the run."""
    kw = dict(num_gpus=640, mbs=4, gbs=2560, use_distributed_optimizer=False, use_megatron_fsdp=True,
              data_parallel_sharding_strategy="optim_grads_params", recompute_granularity="full",
              recompute_method="uniform", recompute_num_layers=1, grad_reduce_in_fp32=False)  # fmt: skip
    ds = estimate_memory(GPT530B, MemoryConfig.from_flat(**kw, framework="deepspeed"))
    mfsdp = estimate_memory(GPT530B, MemoryConfig.from_flat(**kw))
    n = sum(parameter_counts(GPT530B, MemoryConfig.from_flat(**kw))[0])
    big = 4 * 20480 * 20480
    assert ds.weights == pytest.approx(2 * n / 640 + 2 * big)
    assert ds.grads == pytest.approx(2 * n / 640 + 2 * (5e8 + big))
    assert mfsdp.weights - ds.weights > 15 * GB
    a100 = 81920 * 2**20 / 1.01  # the driver's 80 GB less the pruning margin
    assert ds.total < a100 < mfsdp.total
    # a small tensor leaves room under the cap: the prefetch bucket (5e7) is gathered too
    small = estimate_memory(LLAMA31_8B, MemoryConfig.from_flat(num_gpus=8, mbs=1, gbs=8, use_megatron_fsdp=True,
                            data_parallel_sharding_strategy="optim_grads_params", framework="deepspeed"))  # fmt: skip
    n8 = sum(parameter_counts(LLAMA31_8B, MemoryConfig.from_flat(num_gpus=8, mbs=1, gbs=8))[0])
    assert small.weights == pytest.approx(2 * n8 / 8 + 2 * (128256 * 4096 + 5e7))


def test_oversized_points_are_still_refused():
    """The framework semantics do not blind the pruner: ZeRO-3 GPT 530B on 64 A100 (18 B x 530 B / 64 of sharded
    state alone) and torchtitan's 8B at MBS 16 on 8 H100 96 GB stay far above the GPU."""
    zero3 = estimate_memory(GPT530B, MemoryConfig.from_flat(
        num_gpus=64, mbs=1, gbs=64, use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params",
        recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1, framework="deepspeed",
    ))  # fmt: skip
    assert zero3.total > 1.5 * 80 * GB
    titan = estimate_memory(LLAMA31_8B, _titan(mbs=16, gbs=128, recompute_granularity="selective"))
    assert titan.total > 1.5 * 96 * GB
