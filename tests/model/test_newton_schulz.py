"""Newton-Schulz accounting: per-matrix cost against the real NS code, matrix list against a real Megatron-Core model,
parallel policies against their definitions."""

from __future__ import annotations

import collections
import socket

import pytest

from bridgebench.model.newton_schulz import (
    MuonMatrix,
    NSPolicy,
    Parallelism,
    _assign,
    muon_matrices,
    ns_flops,
    ns_load,
    per_tp_rank_flops,
)
from bridgebench.model.spec import ModelSpec


@pytest.mark.parametrize("shape", [(64, 256), (256, 64), (96, 96), (48, 80)])
def test_ns_flops_equal_torch_flop_counter_on_real_newton_schulz(shape):
    """emerging-optimizers' own newton_schulz, counted by torch.utils.flop_counter, costs exactly 4m^2n + 2m^3 a
    step."""
    torch = pytest.importorskip("torch")
    from emerging_optimizers.orthogonalized_optimizers.muon_utils import newton_schulz
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(*shape)
    with FlopCounterMode(display=False) as counter:
        newton_schulz(x, steps=5, coefficient_type="quintic")
    assert counter.get_total_flops() == ns_flops(*shape, steps=5, kernel="gemm")


def _tp_rank_flops(rank, world, store_path, shapes, out_path):
    """One TP rank of a real gloo group: FLOPs of emerging-optimizers' ``newton_schulz_tp`` (distributed mode) on
    this rank's shard of each matrix, counted by torch.utils.flop_counter."""
    import json

    import torch
    from emerging_optimizers.orthogonalized_optimizers.muon_utils import newton_schulz_tp
    from torch.utils.flop_counter import FlopCounterMode

    store = torch.distributed.FileStore(store_path, world)
    torch.distributed.init_process_group("gloo", store=store, rank=rank, world_size=world)
    try:
        group = torch.distributed.new_group(list(range(world)))
        counts = []
        for rows, cols, dim in shapes:
            shard = (rows // world, cols) if dim == 0 else (rows, cols // world)
            x = torch.randn(*shard, generator=torch.Generator().manual_seed(rank))
            with FlopCounterMode(display=False) as counter:
                newton_schulz_tp(x, 5, "quintic", tp_group=group, partition_dim=dim, tp_mode="distributed")
            counts.append(counter.get_total_flops())
        with open(f"{out_path}.{rank}", "w") as f:
            json.dump(counts, f)
    finally:
        torch.distributed.destroy_process_group()


def test_distributed_tp_mode_equals_real_newton_schulz_tp(tmp_path):
    """TP = 2 ranks of a real gloo group run emerging-optimizers' ``newton_schulz_tp(tp_mode="distributed")``; every
    rank's counted FLOPs equal :func:`per_tp_rank_flops`. The old count (full-matrix FLOPs // TP) is lower for every
    shape here: the small ``u x u`` product is repeated on every rank."""
    import json

    pytest.importorskip("torch")
    import torch.multiprocessing as mp

    world = 2
    shapes = [(256, 64, 0), (64, 256, 0), (96, 160, 1), (160, 96, 1)]
    mp.spawn(_tp_rank_flops, args=(world, str(tmp_path / "store"), shapes, str(tmp_path / "flops")), nprocs=world)
    for rank in range(world):
        counted = json.loads((tmp_path / f"flops.{rank}").read_text())
        for (rows, cols, dim), got in zip(shapes, counted):
            m = MuonMatrix("w", "attention", 0, rows, cols, "w", tp_partition_dim=dim)
            ours = per_tp_rank_flops(m, world, NSPolicy(tp_mode="distributed"))
            assert got == ours, (rows, cols, dim)
            assert got > ns_flops(rows, cols) // world, "the old formula would have matched"


def test_ns_flops_formulas():
    m, n = 3, 7
    assert ns_flops(m, n, 1, "gemm") == 4 * m * m * n + 2 * m**3
    assert ns_flops(n, m, 2, "syrk") == 2 * (3 * m * m * n + m**3)
    with pytest.raises(ValueError, match="positive"):
        ns_flops(0, 4)
    with pytest.raises(ValueError, match="muon_num_ns_steps"):
        NSPolicy(num_ns_steps=0)
    with pytest.raises(ValueError, match="muon_tp_mode"):
        NSPolicy(tp_mode="sharded")


TINY_MOE = dict(
    name="tiny_moe",
    num_layers=3,
    hidden_size=64,
    ffn_hidden_size=128,
    num_attention_heads=4,
    num_query_groups=2,
    kv_channels=16,
    vocab_size=128,
    seq_length=32,
    num_moe_experts=4,
    moe_ffn_hidden_size=32,
    moe_shared_expert_intermediate_size=48,
    moe_router_topk=2,
    moe_layer_freq=[0, 1, 1],
    mtp_num_layers=1,
)


@pytest.fixture(scope="module")
def real_gpt_params():
    """Named parameters of a real Megatron-Core GPTModel (local spec, CPU), with Megatron-Core's own Muon/Adam split."""
    torch = pytest.importorskip("torch")
    from bridgebench.mbridge import te_stub

    te_stub.install()
    import torch.nn.functional as F
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec
    from megatron.core.optimizer.emerging_optimizers import _is_nonlinear_or_embedding
    from megatron.core.transformer.transformer_config import TransformerConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        parallel_state.initialize_model_parallel(1, 1)
        spec = {k: v for k, v in TINY_MOE.items() if k not in ("name", "vocab_size", "seq_length")}
        cfg = TransformerConfig(
            **spec,
            gated_linear_unit=True,
            activation_func=F.silu,
            add_bias_linear=False,
            use_cpu_initialization=True,
            normalization="RMSNorm",
            bf16=False,
            params_dtype=torch.float32,
        )
        block = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False)
        model = GPTModel(
            cfg,
            block,
            vocab_size=128,
            max_sequence_length=32,
            position_embedding_type="rope",
            mtp_block_spec=get_gpt_mtp_block_spec(cfg, block, use_transformer_engine=False),
        )
        yield [(name, tuple(p.shape), not _is_nonlinear_or_embedding(p)) for name, p in model.named_parameters()]
    finally:
        parallel_state.destroy_model_parallel()
        torch.distributed.destroy_process_group()


@pytest.mark.megatron
def test_muon_matrices_match_a_real_megatron_core_model(real_gpt_params):
    muon_params = collections.Counter(shape for _, shape, muon in real_gpt_params if muon)
    ours = collections.Counter(
        (m.rows, m.cols) for m in muon_matrices(ModelSpec.from_mapping(TINY_MOE), split_qkv=False)
    )
    assert ours == muon_params
    adam = [name for name, shape, muon in real_gpt_params if not muon]
    assert "embedding.word_embeddings.weight" in adam and "output_layer.weight" in adam
    assert all(len(shape) == 2 or not muon for _, shape, muon in real_gpt_params)


def test_split_qkv_pieces_sum_to_the_fused_param():
    m = ModelSpec.from_mapping(TINY_MOE)
    split = [x for x in muon_matrices(m, split_qkv=True) if x.param.endswith("linear_qkv") and x.layer == 0]
    fused = [x for x in muon_matrices(m, split_qkv=False) if x.param.endswith("linear_qkv") and x.layer == 0]
    assert [(x.rows, x.cols) for x in split] == [(64, 64), (32, 64), (32, 64)]  # Q (n d), K (g d), V (g d)
    assert sum(x.rows for x in split) == fused[0].rows


def test_attention_matrices_are_the_flops_models_projections(models):
    """2 x (sum of the per-layer attention matrix sizes) is the forward projection FLOPs/token of the FLOPs model
    (MLA: less the q/kv norm terms), so the NS matrix list and the FLOPs model describe the same layers."""
    from bridgebench.model.flops import model_flops

    for m in models.values():
        layer0 = [x for x in muon_matrices(m) if x.layer == 0 and x.family == "attention"]
        size = sum(x.rows * x.cols for x in layer0)
        proj = model_flops(m, formula="v2").attention_projections / m.seq_length  # per token, 6 (L + mtp) x sizes
        norms = (m.q_lora_rank or 0) + m.kv_lora_rank if m.multi_latent_attention else 0
        assert proj == 6 * (m.num_layers + m.mtp_layers) * (size + norms)


def test_layer_wise_counts_each_matrix_once_and_replicated_counts_it_dp_times(models):
    q = models["qwen3_30b_a3b"]
    par = Parallelism.from_flat(num_gpus=8, expert_model_parallel_size=8)
    lw = ns_load(q, par, NSPolicy(layer_wise=True))
    rep = ns_load(q, par, NSPolicy(layer_wise=False))
    assert lw.total == lw.per_replica  # TP 1: the whole model's NS once
    assert lw.per_gpu_mean == lw.total / 8 and lw.per_gpu_max >= lw.per_gpu_mean
    dense = sum(v for k, v in lw.by_family.items() if k != "expert")
    # experts have expert-DP 1 here, so only the dense params are repeated on all 8 DP ranks
    assert rep.total == lw.total + 7 * dense


def test_tp_modes():
    m = MuonMatrix("w", "attention", 0, 256, 64, "w", tp_partition_dim=0)
    full = ns_flops(256, 64)
    assert per_tp_rank_flops(m, 4, NSPolicy(tp_mode="duplicated")) == full
    # distributed: the Gram matrix is on the unsharded side (64) and repeated on every rank, not full // TP
    assert per_tp_rank_flops(m, 4, NSPolicy(tp_mode="distributed")) == 5 * (4 * 64 * 64 * 64 + 2 * 64**3)
    assert per_tp_rank_flops(m, 4, NSPolicy(tp_mode="distributed")) > full // 4
    assert per_tp_rank_flops(m, 4, NSPolicy(tp_mode="blockwise")) == ns_flops(64, 64)
    with pytest.raises(ValueError, match="not divisible by tensor parallel size 3"):
        per_tp_rank_flops(m, 3, NSPolicy(tp_mode="blockwise"))


def test_ping_pong_assignment_follows_megatron_core_docstring():
    """megatron-core 0.19.2 layer_wise_optimizer.py::_shard_params_ping_pong: 4 ranks, p0..p9 sorted by numel ->
    [[p0, p7, p8], [p1, p6, p9], [p2, p5], [p3, p4]]."""
    flops = {f"p{i}": 10**i for i in range(10)}
    numel = {f"p{i}": i for i in range(10)}
    loads = _assign(flops, numel, 4, layer_wise=True)
    assert loads == [10**0 + 10**7 + 10**8, 10**1 + 10**6 + 10**9, 10**2 + 10**5, 10**3 + 10**4]
    assert _assign(flops, numel, 4, layer_wise=False) == [sum(flops.values())] * 4


def test_parallel_grid_errors(models):
    with pytest.raises(ValueError, match="not divisible by TP x PP x CP"):
        ns_load(models["qwen3_30b_a3b"], Parallelism.from_flat(num_gpus=6, pipeline_model_parallel_size=4))
    with pytest.raises(ValueError, match="num_moe_experts 128 is not divisible by EP 3"):
        ns_load(models["qwen3_30b_a3b"], Parallelism.from_flat(num_gpus=3, expert_model_parallel_size=3))


def test_pipeline_layout_places_layers(models):
    """Kimi K2's published layout puts 4 decoder layers in the first virtual stage and 1 in the last; the total NS
    work is the same as with an even split, only its placement (and so the busiest GPU) changes."""
    from bridgebench.model.newton_schulz import pp_stage_of_layer

    kimi = models["kimi_k2"]
    base = dict(
        num_gpus=256,
        pipeline_model_parallel_size=4,
        virtual_pipeline_model_parallel_size=4,
        expert_model_parallel_size=64,
        expert_tensor_parallel_size=1,
    )
    laid = Parallelism.from_flat(**base, pipeline_model_parallel_layout="Et*4|(t*4|)*14tL")
    stages = pp_stage_of_layer(kimi, laid)
    assert stages[:4] == [0] * 4 and stages[4:8] == [1] * 4 and stages[-1] == 3 and len(stages) == 61
    assert ns_load(kimi, laid).total == ns_load(kimi, Parallelism.from_flat(**base)).total
    with pytest.raises(ValueError, match="holds 60 decoder layers"):
        pp_stage_of_layer(kimi, Parallelism.from_flat(**base, pipeline_model_parallel_layout="Et*4|(t*4|)*14L"))
