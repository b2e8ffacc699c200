"""Peak GPU memory of one Megatron-Core training step, per GPU, on the busiest rank (bytes).

Pure Python (no torch, megatron, pandas, Hydra or YAML import), so a sweep scores thousands of points per second:
per-model parameter tables and per-(stage, group) optimizer states are computed once and cached.

The model, split by concern (public names are re-exported here):

==================  ================================================================================================
module              what it holds
==================  ================================================================================================
``config``          the inputs (:class:`MemoryConfig`), the result (:class:`MemoryBreakdown`), byte constants, checks
``tables``          per-model parameter tensors of each layer kind and of one routed expert
``pipeline``        the layers of each pipeline rank, in-flight microbatches per virtual chunk
``activations``     saved activations per layer and token, and per rank at its peak
``state``           parameters per GPU, optimizer state dealt over the data-parallel group, weights and gradients
``frameworks``      torchtitan's FSDP2 and op-level checkpointing, DeepSpeed ZeRO-3 (to check published runs)
``estimate``        :func:`estimate_memory`: every term of every rank, the busiest kept
==================  ================================================================================================

Sources of the formulas (each term below names its own):

[K22]  Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", arXiv 2205.05198 (2022),
       Sec. 4 and Table 2: per-layer activations ``s b h (34 + 5 a s / h)`` bytes; the ``5 a s / h`` attention-score
       term vanishes with fused (flash) attention; sequence parallelism splits the rest by TP.
[MLM]  Megatron-LM ``megatron/training/theoretical_memory_usage.py`` (core_r0.18.0, PR #4687): bytes per parameter
       ``18`` without the distributed optimizer (2 bf16 weight + 4 fp32 grad + 4 fp32 master + 8 Adam moments),
       ``6 + 12 / DP`` with it; embedding on the first stage, output layer on the last; embedding input and dropout
       ``8 s b + s b h`` per in-flight microbatch; ``4 s b (h + V)`` for the output layer and cross entropy.
[MB]   Megatron-Bridge 0.6.2 ``megatron/bridge/training/utils/theoretical_memory_utils.py``
       (``estimate_training_memory``): the same byte model, dense optimizer shard ``DP x CP``, routed experts sharded
       by ``EP x ETP`` with optimizer shard ``EDP = DP x TP x CP / (EP x ETP)``.
[ISK]  ISEEKYAN/mbridge ``memory_estimator/estimate_013.py`` and ``moe_mem_estimator/layers.py`` (the estimator MB
       adapted): per-module activations (MLA, grouped MLP, router, dispatcher), in-flight microbatches per pipeline
       rank and virtual chunk, selective (per-module) and full recompute.
[MC]   megatron-core 0.19.2 ``megatron/core/optimizer/layer_wise_optimizer.py`` (``LayerWiseDistributedOptimizer``,
       the ``dist_muon`` optimizer): WHOLE parameters are dealt to the ranks of the DP x CP group (routed experts:
       the expert-DP group). Legacy path ``_shard_params_ping_pong`` (the 26.02 recipes, distributed optimizer off):
       all params sorted by numel ascending, dealt ``0..G-1, G-1..0``; param-layout path
       (``use_distributed_optimizer``): Adam-side params through ``DistributedOptimizer``, Muon matrices
       balanced whole over the group. The fp32 master copy and the momentum exist only for owned params.
       emerging-optimizers 0.3.0 ``OrthogonalizedOptimizer``: one fp32 ``momentum_buffer`` per matrix.
[TE]   Transformer Engine FP8 / MXFP8: quantized weight copies (row- and column-wise, 1 B per value, MXFP8 plus one
       E8M0 scale per 32 values) are cached across microbatches; GEMM inputs saved for the weight gradient are kept
       quantized (1 B, + 1/32 B scale for MXFP8) instead of bf16 (research notes ``sweeps_and_compare.md`` Sec. 1.6,
       "MXFP8 extras").

[TT]   torchtitan@9dec370 (Dec 2024, the commit of ``benchmarks/llama3_h100_202412_torchtitan.md``), for
       ``framework="torchtitan"``: ``torchtitan/parallelisms/parallelize_llama.py`` -- op-level selective activation
       checkpointing (``selective_ac_option = "op"``, the ``llama3_8b.toml`` default): per TransformerBlock, save the
       outputs of ``aten.mm`` except every second one, of the SDPA kernels and of ``reduce_scatter_tensor``,
       recompute the rest; ``apply_fsdp``: FSDP2 ``fully_shard`` per block and on the root, ``MixedPrecisionPolicy(
       param_dtype=bf16, reduce_dtype=fp32)`` over fp32 sharded parameters, ``reshard_after_forward=False`` under
       pipeline parallelism; ``train.py`` ``loss_fn``: ``cross_entropy(pred.flatten(0, 1).float(), ...)``.
[DS]   DeepSpeed ZeRO-3 (``deepspeed/runtime/zero/constants.py``, the 2021 releases Megatron-LM's ZeRO-3 comparison
       ran, arXiv 2104.04473 Sec. 5.2), for ``framework="deepspeed"``: parameters are gathered per submodule (each
       parameter tensor whole) with at most ``stage3_max_live_parameters`` (default 1e9) resident, plus
       ``stage3_prefetch_bucket_size`` (default 5e7) prefetched; gradients are reduce-scattered in
       ``reduce_bucket_size`` (default 5e8) buckets.
[FSDP] megatron-core 0.19.2 ``megatron/core/distributed/fsdp/src/megatron_fsdp/`` (Megatron-FSDP,
       ``use_megatron_fsdp``): ``data_parallel_sharding_strategy`` shards optimizer state, gradients and parameters
       over the DP x CP group (routed experts: expert-DP); parameters are all-gathered per unit (a decoder layer, the
       embedding, the output layer), the next unit prefetched; ``fsdp_double_buffer`` keeps two gradient buffers.
[PAO]  megatron-core 0.19.2 ``megatron/core/optimizer/optimizer_config.py`` (``use_precision_aware_optimizer``,
       ``main_params_dtype``, ``exp_avg_dtype``, ``exp_avg_sq_dtype``): Adam's master weights and moments in the
       configured dtypes.
[OFF]  megatron-core 0.19.2 ``megatron/core/transformer/transformer_config.py``: layer-wise activation offloading
       (``cpu_offloading``, ``cpu_offloading_num_layers``, ``cpu_offloading_activations``) and fine-grained
       offloading (``fine_grained_activation_offloading`` with ``offload_modules``).

``other_bytes`` (allocator-visible workspaces: cuBLAS / TE workspaces, RNG states, data and loss buffers) is a
calibration, not a derivation: its value and source are in ``configs/calibration/default.yaml``.

Not modelled here: allocator fragmentation (reserved vs allocated: the pruner's margin,
``bridgebench.config.calibration``), CUDA-graph private pools, NCCL buffers outside the PyTorch allocator, dispatcher
(DeepEP / HybridEP) workspaces, transient wgrad buffers, token-routing imbalance beyond the ``moe_imbalance`` factor.
"""

from __future__ import annotations

from bridgebench.model.memory.activations import ActivationSettings, layer_act_per_token, rank_activations
from bridgebench.model.memory.config import (
    DTYPE_BYTES,
    FRAMEWORKS,
    FSDP_STRATEGIES,
    LOGITS_BYTES_FUSED,
    LOGITS_BYTES_UNFUSED,
    OFFLOAD_MODULES,
    OPTIMIZERS,
    PRECISION_SAVED_INPUT,
    PRECISION_WEIGHT_EXTRA,
    RECOMPUTE_GRANULARITIES,
    GiB,
    MemoryBreakdown,
    MemoryConfig,
    MemoryModelError,
    adam_state_bytes,
    check_config,
    dtype_bytes,
)
from bridgebench.model.memory.estimate import estimate_memory
from bridgebench.model.memory.frameworks import LOGITS_BYTES_TORCHTITAN
from bridgebench.model.memory.pipeline import Chunk, inflight_microbatches, rank_chunks, stage_chunks
from bridgebench.model.memory.state import (
    Run,
    dist_muon_state_by_rank,
    lpt_loads,
    parameter_counts,
    ping_pong_loads,
    ping_pong_runs,
)
from bridgebench.model.memory.tables import ModelTables, model_tables

__all__ = [
    "ActivationSettings",
    "Chunk",
    "DTYPE_BYTES",
    "FRAMEWORKS",
    "FSDP_STRATEGIES",
    "GiB",
    "LOGITS_BYTES_FUSED",
    "LOGITS_BYTES_TORCHTITAN",
    "LOGITS_BYTES_UNFUSED",
    "MemoryBreakdown",
    "MemoryConfig",
    "MemoryModelError",
    "ModelTables",
    "OFFLOAD_MODULES",
    "OPTIMIZERS",
    "PRECISION_SAVED_INPUT",
    "PRECISION_WEIGHT_EXTRA",
    "RECOMPUTE_GRANULARITIES",
    "Run",
    "adam_state_bytes",
    "check_config",
    "dist_muon_state_by_rank",
    "dtype_bytes",
    "estimate_memory",
    "inflight_microbatches",
    "layer_act_per_token",
    "lpt_loads",
    "model_tables",
    "parameter_counts",
    "ping_pong_loads",
    "ping_pong_runs",
    "rank_activations",
    "rank_chunks",
    "stage_chunks",
]
