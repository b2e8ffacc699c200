"""Newton-Schulz (NS) FLOPs of one Muon optimizer step.

Which matrices Muon orthogonalizes (megatron-core 0.19.2 ``megatron/core/optimizer/emerging_optimizers.py``):
every 2-D parameter except the embedding and the output layer (``_is_nonlinear_or_embedding`` routes those and all
1-D parameters -- norms, biases, the router's expert bias -- to Adam). So Muon takes, per decoder layer:

- attention: GQA ``linear_qkv`` (split into Q ``(n d, h)``, K ``(g d, h)``, V ``(g d, h)`` when
  ``muon_split_qkv``, Megatron-Bridge 0.6.2 default True; see ``TensorParallelMuon.orthogonalize``) and
  ``linear_proj`` ``(h, n d)``; MLA ``linear_q_down_proj`` ``(q_lora, h)``, ``linear_q_up_proj``
  ``(n (qk + rope), q_lora)`` (or ``linear_q_proj`` ``(n (qk + rope), h)``), ``linear_kv_down_proj``
  ``(kv_lora + rope, h)``, ``linear_kv_up_proj`` ``(n (qk + v), kv_lora)``, ``linear_proj`` ``(h, n v)``;
- MLP: dense ``linear_fc1`` ``(2 ffn, h)`` (gate and up fused, orthogonalized whole) and ``linear_fc2`` ``(h, ffn)``;
  MoE router ``(E, h)``, each expert's ``fc1`` ``(2 moe_ffn, h)`` and ``fc2`` ``(h, moe_ffn)`` (TE grouped GEMM
  keeps one weight per expert), the shared expert's ``fc1``/``fc2``;
- each MTP layer: ``eh_proj`` ``(h, 2 h)`` plus a full transformer layer of the last decoder layer's kind.

Cost of one NS step on an ``m x n`` matrix with ``m <= n`` (the iteration runs on the smaller Gram matrix;
emerging-optimizers 0.3.0 ``orthogonalized_optimizers/muon_utils.py::newton_schulz`` transposes when rows > cols):
``A = X X^T`` (``2 m^2 n``), ``B = b A + c A A`` (``2 m^3``), ``X' = a X + B X`` (``2 m^2 n``) -> ``4 m^2 n + 2 m^3``
with GEMMs; with SYRK kernels for the symmetric products (``newton_schulz_step_tsyrk``) only one triangle is
computed -> ``3 m^2 n + m^3``. Times ``muon_num_ns_steps`` (5).

Counting policy (:class:`NSPolicy`) is explicit:

- ``kernel``: ``gemm`` or ``syrk``.
- ``tp_mode`` (``muon_tp_mode``): ``blockwise`` -- each TP rank orthogonalizes its own shard (per-shard shapes);
  ``duplicated`` -- the full matrix is all-gathered and orthogonalized on every TP rank; ``distributed`` -- each rank
  iterates on its shard with the Gram matrix on the unsharded dimension, all-reduced over TP, so the small
  ``u x u`` product is repeated on every rank (:func:`ns_flops_distributed`).
- ``layer_wise``: the layer-wise distributed optimizer (``dist_muon``) assigns each whole parameter to one rank of
  its data-parallel group, so each matrix is orthogonalized once per DP replica group; plain ``muon`` repeats the
  work on every DP rank. The per-GPU split follows Megatron-Core's assignment of whole params to ranks
  (``LayerWiseDistributedOptimizer._shard_params_ping_pong``, megatron-core 0.19.2
  ``megatron/core/optimizer/layer_wise_optimizer.py``: params sorted by numel, dealt out in ping-pong order over
  the DP x CP group, experts separately over the expert-DP group), so the busiest GPU is reported beside the mean.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal

from bridgebench.errors import BridgebenchError
from bridgebench.model.parallel import DimsView, ParallelDims
from bridgebench.model.spec import ModelSpec


class NSError(BridgebenchError):
    """A Newton-Schulz count that cannot be made for this model, parallelism or policy (the message says why)."""


Kernel = Literal["gemm", "syrk"]
TPMode = Literal["blockwise", "duplicated", "distributed"]


@dataclass(frozen=True, kw_only=True)
class MuonMatrix:
    """One matrix Muon orthogonalizes (full, unsharded shape ``rows x cols``, weight layout ``(out, in)``).

    ``param`` groups the split pieces of one parameter (fused QKV -> Q, K, V share a param id);
    ``tp_partition_dim`` is 0 for column-parallel, 1 for row-parallel, None for not TP-sharded.
    """

    name: str
    family: str  # attention | mlp_dense | router | expert | shared_expert | mtp
    layer: int  # decoder layer index; num_layers + i for MTP layer i
    rows: int
    cols: int
    param: str
    is_expert: bool = False
    tp_partition_dim: int | None = None


@dataclass(frozen=True, kw_only=True)
class NSPolicy:
    """How NS work is counted; see the module docstring. Defaults = Megatron-Bridge 0.6.2 ``OptimizerConfig``
    (``muon_num_ns_steps=5``, ``muon_tp_mode='blockwise'``, ``muon_split_qkv=True``) with GEMM kernels and the
    layer-wise distributed optimizer (``dist_muon``)."""

    num_ns_steps: int = 5
    kernel: Kernel = "gemm"
    tp_mode: TPMode = "blockwise"
    layer_wise: bool = True
    split_qkv: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.num_ns_steps, bool) or not isinstance(self.num_ns_steps, int) or self.num_ns_steps < 1:
            raise NSError(f"muon_num_ns_steps must be a positive integer, got {self.num_ns_steps!r}")
        if self.kernel not in ("gemm", "syrk"):
            raise NSError(f"NS kernel must be 'gemm' or 'syrk', got {self.kernel!r}")
        if self.tp_mode not in ("blockwise", "duplicated", "distributed"):
            raise NSError(f"muon_tp_mode must be 'blockwise', 'duplicated' or 'distributed', got {self.tp_mode!r}")


@dataclass(frozen=True, kw_only=True)
class Parallelism(DimsView):
    """The parallel sizes of a run as the Newton-Schulz model reads them: ``dims``
    (:class:`bridgebench.model.parallel.ParallelDims`; ``world = TP x PP x CP x DP``, experts ``ETP x EP x EDP x PP``)
    and Megatron-Core's ``pipeline_model_parallel_layout``. ``Parallelism.from_flat(num_gpus=..,
    tensor_model_parallel_size=..)`` takes short or Megatron-Core names."""

    dims: ParallelDims
    pipeline_model_parallel_layout: str | None = None

    @property
    def dp(self) -> int:
        """Data-parallel size; NSError when TP x PP x CP does not divide ``num_gpus`` (rule ``world_size``)."""
        return _exact(self.dims.world_size_problem(), self.dims.dp)

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel size; NSError when ETP x EP x PP does not divide ``num_gpus`` (rule ``expert_grid``)."""
        return _exact(self.dims.expert_grid_problem(), self.dims.edp)


def _exact(problem: str | None, size: int) -> int:
    """``size`` when the grid divides the world size (``problem`` None).

    Raises:
        NSError: ``problem``, the message of the broken rule.
    """
    if problem:
        raise NSError(problem)
    return size


def ns_flops(rows: int, cols: int, steps: int = 5, kernel: Kernel = "gemm") -> int:
    """FLOPs of ``steps`` NS iterations on a ``rows x cols`` matrix: ``steps * (4 m^2 n + 2 m^3)`` (GEMM) or
    ``steps * (3 m^2 n + m^3)`` (SYRK), ``m = min``, ``n = max``. Raises ValueError on non-positive sizes.

    Source: emerging-optimizers 0.3.0 ``orthogonalized_optimizers/muon_utils.py`` (``newton_schulz_step``,
    ``newton_schulz_step_tsyrk``); Jordan et al., "Muon: An optimizer for hidden layers" (2024).
    """
    if rows <= 0 or cols <= 0:
        raise NSError(f"matrix sizes must be positive, got {rows} x {cols}")
    m, n = min(rows, cols), max(rows, cols)
    per_step = 4 * m * m * n + 2 * m**3 if kernel == "gemm" else 3 * m * m * n + m**3
    return steps * per_step


def _layer_matrices(model: ModelSpec, layer: int, is_moe: bool, split_qkv: bool, family_attn: str) -> list[MuonMatrix]:
    h = model.hidden_size
    n = model.num_attention_heads
    out: list[MuonMatrix] = []
    pre = f"layers.{layer}"

    def add(name, family, rows, cols, param=None, expert=False, tp_dim=None):
        out.append(
            MuonMatrix(
                name=f"{pre}.{name}",
                family=family,
                layer=layer,
                rows=rows,
                cols=cols,
                param=f"{pre}.{param or name}",
                is_expert=expert,
                tp_partition_dim=tp_dim,
            )
        )

    if model.multi_latent_attention:
        qk, rope, v = model.qk_head_dim, model.qk_pos_emb_head_dim, model.v_head_dim
        if model.q_lora_rank is None:
            add("self_attention.linear_q_proj", family_attn, n * (qk + rope), h, tp_dim=0)
        else:
            add("self_attention.linear_q_down_proj", family_attn, model.q_lora_rank, h)
            add("self_attention.linear_q_up_proj", family_attn, n * (qk + rope), model.q_lora_rank, tp_dim=0)
        add("self_attention.linear_kv_down_proj", family_attn, model.kv_lora_rank + rope, h)
        add("self_attention.linear_kv_up_proj", family_attn, n * (qk + v), model.kv_lora_rank, tp_dim=0)
        add("self_attention.linear_proj", family_attn, h, n * v, tp_dim=1)
    else:
        d, g = model.head_dim, model.query_groups
        gate = n * d if model.attention_output_gate else 0
        qkv = "self_attention.linear_qkv"
        if split_qkv:
            add(qkv + ".q", family_attn, n * d, h, param=qkv, tp_dim=0)
            if gate:
                add(qkv + ".gate", family_attn, gate, h, param=qkv, tp_dim=0)
            add(qkv + ".k", family_attn, g * d, h, param=qkv, tp_dim=0)
            add(qkv + ".v", family_attn, g * d, h, param=qkv, tp_dim=0)
        else:
            add(qkv, family_attn, n * d + gate + 2 * g * d, h, tp_dim=0)
        add("self_attention.linear_proj", family_attn, h, n * d, tp_dim=1)

    glu = 2 if model.gated_linear_unit else 1
    if not is_moe:
        add("mlp.linear_fc1", "mlp_dense", glu * model.ffn_hidden_size, h, tp_dim=0)
        add("mlp.linear_fc2", "mlp_dense", h, model.ffn_hidden_size, tp_dim=1)
        return out
    e_ffn = model.moe_ffn_hidden_size or model.ffn_hidden_size
    add("mlp.router", "router", model.num_moe_experts, h)
    for e in range(model.num_moe_experts):
        add(f"mlp.experts.linear_fc1.weight{e}", "expert", glu * e_ffn, h, expert=True, tp_dim=0)
        add(f"mlp.experts.linear_fc2.weight{e}", "expert", h, e_ffn, expert=True, tp_dim=1)
    if model.moe_shared_expert_intermediate_size:
        s_ffn = model.moe_shared_expert_intermediate_size
        add("mlp.shared_experts.linear_fc1", "shared_expert", glu * s_ffn, h, tp_dim=0)
        add("mlp.shared_experts.linear_fc2", "shared_expert", h, s_ffn, tp_dim=1)
    return out


def muon_matrices(model: ModelSpec, *, split_qkv: bool = True) -> list[MuonMatrix]:
    """All matrices of one model replica that Muon orthogonalizes, full (unsharded) shapes.

    Returns one :class:`MuonMatrix` per orthogonalized matrix, decoder layers first, then MTP layers (a new list;
    the matrices of a model are built once per process: Kimi K2 has 46,567).
    Embedding, output layer and 1-D parameters are excluded (they go to Adam).
    """
    return list(_muon_matrices(repr(model), model, split_qkv))


_MATRICES: dict[tuple[str, bool], tuple[MuonMatrix, ...]] = {}


def _muon_matrices(key: str, model: ModelSpec, split_qkv: bool) -> tuple[MuonMatrix, ...]:
    """:func:`muon_matrices`, memoized by the model's full field values (``repr`` of the frozen spec)."""
    if (key, split_qkv) not in _MATRICES:
        if len(_MATRICES) > 64:
            _MATRICES.clear()
        _MATRICES[(key, split_qkv)] = tuple(_build_matrices(model, split_qkv))
    return _MATRICES[(key, split_qkv)]


def _build_matrices(model: ModelSpec, split_qkv: bool) -> list[MuonMatrix]:
    pattern = model.moe_layer_pattern
    mats: list[MuonMatrix] = []
    for i in range(model.num_layers):
        mats += _layer_matrices(model, i, bool(pattern[i]), split_qkv, "attention")
    for j in range(model.mtp_layers):
        layer = model.num_layers + j
        h = model.hidden_size
        mats.append(
            MuonMatrix(
                name=f"mtp.layers.{j}.eh_proj",
                family="mtp",
                layer=layer,
                rows=h,
                cols=2 * h,
                param=f"mtp.layers.{j}.eh_proj",
                tp_partition_dim=0,
            )
        )
        mats += [
            MuonMatrix(
                name=m.name.replace(f"layers.{layer}", f"mtp.layers.{j}.transformer_layer"),
                family=m.family,
                layer=layer,
                rows=m.rows,
                cols=m.cols,
                param=m.param.replace(f"layers.{layer}", f"mtp.layers.{j}.transformer_layer"),
                is_expert=m.is_expert,
                tp_partition_dim=m.tp_partition_dim,
            )
            for m in _layer_matrices(model, layer, bool(pattern[-1]), split_qkv, "attention")
        ]
    return mats


def shard_of(m: MuonMatrix, tp: int) -> tuple[int, int]:
    """Per-TP-rank shape of a matrix (Megatron-Core column/row parallel linear layers)."""
    if tp == 1 or m.tp_partition_dim is None:
        return m.rows, m.cols
    if m.tp_partition_dim == 0:
        if m.rows % tp:
            raise NSError(f"{m.name}: {m.rows} rows are not divisible by tensor parallel size {tp}")
        return m.rows // tp, m.cols
    if m.cols % tp:
        raise NSError(f"{m.name}: {m.cols} columns are not divisible by tensor parallel size {tp}")
    return m.rows, m.cols // tp


def ns_flops_distributed(unsharded: int, local: int, steps: int = 5, kernel: Kernel = "gemm") -> int:
    """FLOPs one TP rank spends on ``steps`` NS iterations of a TP-sharded matrix in ``distributed`` mode.

    Each rank holds ``X`` of shape ``unsharded x local`` (transposed so that the unsharded dimension is the Gram side,
    whichever side is smaller): ``A = X X^T`` (``2 u^2 l``, then all-reduced over TP), ``B = b A + c A A``
    (``2 u^3``: the small product is repeated on every rank), ``X' = a X + B X`` (``2 u^2 l``) ->
    ``4 u^2 l + 2 u^3`` per step with GEMMs (``3 u^2 l + u^3`` with SYRK kernels, a hypothetical here:
    ``newton_schulz_tp`` does not forward ``use_syrk``).

    Source: emerging-optimizers 0.3.0 ``orthogonalized_optimizers/muon_utils.py`` (``newton_schulz_tp``,
    ``tp_mode="distributed"``: ``transpose = partition_dim == 0``; ``newton_schulz_step`` all-reduces ``A``).

    Raises:
        NSError: non-positive sizes.
    """
    if unsharded <= 0 or local <= 0:
        raise NSError(f"matrix sizes must be positive, got {unsharded} x {local}")
    u, n = unsharded, local
    per_step = 4 * u * u * n + 2 * u**3 if kernel == "gemm" else 3 * u * u * n + u**3
    return steps * per_step


def per_tp_rank_flops(m: MuonMatrix, tp: int, policy: NSPolicy) -> int:
    """NS FLOPs one TP rank spends on matrix ``m`` per optimizer step (exact integers).

    ``blockwise``: NS of the rank's own shard. ``duplicated``: the all-gathered full matrix on every rank.
    ``distributed``: :func:`ns_flops_distributed` on the rank's shard, whose Gram matrix is on the unsharded
    dimension. Matrices that are not TP-sharded (``tp_partition_dim is None``) fall back to the full-matrix NS
    in every mode (emerging-optimizers 0.3.0 ``newton_schulz_tp``: ``partition_dim is None``).
    """
    steps, kernel = policy.num_ns_steps, policy.kernel
    if tp == 1 or m.tp_partition_dim is None:
        return ns_flops(m.rows, m.cols, steps, kernel)
    if policy.tp_mode == "blockwise":
        return ns_flops(*shard_of(m, tp), steps, kernel)
    if policy.tp_mode == "duplicated":
        return ns_flops(m.rows, m.cols, steps, kernel)
    rows, cols = shard_of(m, tp)
    unsharded, local = (cols, rows) if m.tp_partition_dim == 0 else (rows, cols)
    return ns_flops_distributed(unsharded, local, steps, kernel)


def pp_stage_of_layer(model: ModelSpec, par: Parallelism) -> list[int]:
    """Pipeline stage holding each decoder layer (and MTP layers).

    With a ``pipeline_model_parallel_layout`` (e.g. Kimi K2's ``"Et*4|(t*4|)*14tL"``) the layout decides: its i-th
    virtual stage lives on pipeline rank ``i % PP`` and holds its ``t`` (decoder) and ``m`` (MTP) layers in order
    (Megatron-Core 0.19.2 ``pipeline_parallel_layer_layout.py``; unrolled by ``bridgebench.model.layout.parse_layout``).
    Without one, layers are split as evenly as possible over ``PP x VP`` virtual chunks, earlier chunks taking the
    remainder, chunk ``c`` on rank ``c % PP``, and MTP layers on the last rank.
    """
    if par.pipeline_model_parallel_layout:
        from bridgebench.model.layout import parse_layout

        decoder: list[int] = []
        mtp: list[int] = []
        for i, stage in enumerate(parse_layout(par.pipeline_model_parallel_layout)):
            decoder += [i % par.pp] * stage.count("t")
            mtp += [i % par.pp] * stage.count("m")
        if len(decoder) != model.num_layers:
            raise NSError(
                f"pipeline layout {par.pipeline_model_parallel_layout!r} holds {len(decoder)} decoder "
                f"layers, the model has {model.num_layers}"
            )
        return decoder + (mtp if len(mtp) == model.mtp_layers else [par.pp - 1] * model.mtp_layers)
    chunks = par.pp * (par.vp or 1)
    base, extra = divmod(model.num_layers, chunks)
    stages = []
    for c in range(chunks):
        stages += [c % par.pp] * (base + (1 if c < extra else 0))
    stages += [par.pp - 1] * model.mtp_layers
    return stages


@dataclass(kw_only=True)
class NSLoad:
    """NS FLOPs of one optimizer step for a whole run.

    ``total`` sums every GPU (FLOPs per step); ``per_gpu_mean = total / num_gpus``; ``per_gpu_max`` is the busiest
    GPU. ``by_family`` splits ``total`` by matrix family. ``per_replica`` is the NS FLOPs of orthogonalizing every
    matrix once at full size (the policy-free floor, FLOPs).
    """

    policy: NSPolicy
    num_gpus: int
    total: int
    per_gpu_max: int
    per_replica: int
    by_family: dict[str, int] = field(default_factory=dict)
    num_matrices: int = 0

    @property
    def per_gpu_mean(self) -> float:
        return self.total / self.num_gpus


def ns_load(model: ModelSpec, par: Parallelism, policy: NSPolicy = NSPolicy()) -> NSLoad:
    """NS FLOPs per optimizer step on every GPU of a run, under ``policy``.

    Args:
        model: architecture.
        par: parallel sizes; ``num_gpus`` GPUs in all.
        policy: counting policy (kernel, TP mode, layer-wise distributed optimizer, QKV split, NS steps).

    Returns:
        :class:`NSLoad` with FLOPs per step (total over GPUs, mean and busiest GPU).

    Raises:
        ValueError: parallel sizes that do not fit the world size or do not divide the matrices.
    """
    _, edp = par.dp, par.expert_dp  # both validate their grid (NSError)
    if model.is_moe and model.num_moe_experts % par.ep:
        raise NSError(f"num_moe_experts {model.num_moe_experts} is not divisible by EP {par.ep}")
    if model.query_groups % par.tp:
        raise NSError(f"num_query_groups {model.query_groups} is not divisible by TP {par.tp}")
    stage_of = pp_stage_of_layer(model, par)
    mats = muon_matrices(model, split_qkv=policy.split_qkv)
    work = _group_work(model, par, policy, mats, stage_of)
    dense_group = par.dims.dp_cp
    # Per-GPU load: GPU = (stage, tp rank, dense-group rank) for dense; (stage, etp rank, ep rank, edp rank) for
    # experts. Every TP rank of a group does the same per-rank work, so the max over TP ranks is the same.
    dense_load = {
        st: _assign(work.dense_flops[st], work.dense_numel[st], dense_group, policy.layer_wise) for st in range(par.pp)
    }
    expert_load = {
        key: _assign(work.expert_flops[key], work.expert_numel[key], edp, policy.layer_wise)
        for key in work.expert_flops
    }
    total = 0
    busiest = 0
    gpus_per_stage = par.num_gpus // par.pp
    for st in range(par.pp):
        for g in range(gpus_per_stage):
            dense_rank = g // par.tp  # (tp fastest, then cp x dp)
            ep_rank = (g // par.etp_) % par.ep
            edp_rank = g // (par.etp_ * par.ep)
            load = dense_load[st][dense_rank] + (
                expert_load[(st, ep_rank)][edp_rank] if (st, ep_rank) in expert_load else 0
            )
            total += load
            busiest = max(busiest, load)
    return NSLoad(
        policy=policy,
        num_gpus=par.num_gpus,
        total=total,
        per_gpu_max=busiest,
        per_replica=work.per_replica,
        by_family=dict(work.by_family),
        num_matrices=len(mats),
    )


@dataclass(kw_only=True)
class _GroupWork:
    """NS FLOPs per TP rank of each param, per pipeline stage (dense params, over DP x CP) and per (stage, EP rank)
    (expert params, over expert-DP), with each param's shard numel; ``by_family`` and ``per_replica`` as in
    :class:`NSLoad`."""

    dense_flops: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    dense_numel: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    expert_flops: dict[tuple[int, int], dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    expert_numel: dict[tuple[int, int], dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    by_family: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    per_replica: int = 0


def _group_work(
    model: ModelSpec, par: Parallelism, policy: NSPolicy, mats: list[MuonMatrix], stage_of: list[int]
) -> _GroupWork:
    """Each matrix's NS FLOPs per TP (expert-TP) rank, added to its param on its pipeline stage (``stage_of[layer]``)
    and, for experts, its EP rank."""
    experts_per_rank = model.local_experts(par.ep)
    edp = par.expert_dp
    work = _GroupWork()
    # the same shape costs the same: (rows, cols, TP dim, TP size) -> (full NS FLOPs, per-TP-rank FLOPs, shard numel)
    cost: dict[tuple[int, int, int | None, int], tuple[int, int, int]] = {}

    def cost_of(m: MuonMatrix, tp: int) -> tuple[int, int, int]:
        key = (m.rows, m.cols, m.tp_partition_dim, tp)
        if key not in cost:
            r, c = shard_of(m, tp)
            full = ns_flops(m.rows, m.cols, policy.num_ns_steps, policy.kernel)
            cost[key] = (full, per_tp_rank_flops(m, tp, policy), r * c)
        return cost[key]

    for m in mats:
        stage = stage_of[m.layer]
        if m.is_expert:
            tp = par.etp_
            full, f, numel = cost_of(m, tp)
            work.per_replica += full
            e = int(m.name.rsplit("weight", 1)[1])
            key = (stage, e // experts_per_rank)
            work.expert_flops[key][m.param] += f
            work.expert_numel[key][m.param] = work.expert_numel[key].get(m.param, 0) + numel
            work.by_family[m.family] += f * tp * (1 if policy.layer_wise else edp)
        else:
            tp = par.tp
            full, f, numel = cost_of(m, tp)
            work.per_replica += full
            work.dense_flops[stage][m.param] += f
            work.dense_numel[stage][m.param] = work.dense_numel[stage].get(m.param, 0) + numel
            work.by_family[m.family] += f * tp * (1 if policy.layer_wise else par.dims.dp_cp)
    return work


def _assign(flops: dict[str, int], numel: dict[str, int], group: int, layer_wise: bool) -> list[int]:
    """NS FLOPs per rank of one data-parallel group.

    Without the layer-wise optimizer every rank does every param. With it, params are sorted by numel (ascending,
    stable) and dealt out ping-pong ``0, 1, ..., G-1, G-1, ..., 0, 0, ...``
    (megatron-core 0.19.2 ``layer_wise_optimizer.py::_shard_params_ping_pong``).
    """
    if not layer_wise or group == 1:
        whole = sum(flops.values())
        return [whole] * group
    loads = [0] * group
    loop = list(range(group)) + list(range(group))[::-1]
    for i, name in enumerate(sorted(flops, key=lambda p: numel[p])):
        loads[loop[i % len(loop)]] += flops[name]
    return loads
