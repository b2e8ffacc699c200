"""Predicted step time and model TFLOP/s/GPU of one training point: a Muon-aware analytic model with a calibration
fitted on NVIDIA's published perf tables.

Pure Python (no torch, megatron, pandas, Hydra or YAML import). GPU facts come from ``configs/gpu`` (:class:`GpuFacts`),
fitted constants from ``configs/calibration`` (:class:`Calibration`); both are read by the config layer.

``t_step = (t_compute + t_recompute + t_a2a) (1 + bubble) + t_overhead + t_optimizer`` (seconds), each term with
its source:

- ``t_compute = F / (N peak eff)``: ``F`` model FLOPs per step (:func:`bridgebench.model.flops.model_flops`, the
  formula NVIDIA's "Model TFLOP/s/GPU" divides by, version of the release), ``N`` GPUs, ``peak`` the dense
  tensor-core peak of the precision (``configs/gpu``, datasheets), ``eff`` a calibrated efficiency per (GPU,
  precision class, model family) (:func:`calibrate`), times the software level of the (model, GPU, peak key) group
  when the published tables have that group (:class:`GroupLevel`: the group's own release trend, shrunk towards the
  pooled one). Tensor- and context-parallel communication is not modelled explicitly: it is inside ``eff``.
- ``t_recompute``: the forward FLOPs activation recomputation repeats, at the same rate (:func:`recompute_flops`:
  ``full`` repeats the recomputed layers' forward, a third of their forward + backward FLOPs; selective modules
  their own forward -- ``core_attn`` the attention core, ``mla_up_proj`` the MLA up-projections, ``mlp`` / ``moe``
  / ``shared_experts`` those MLPs; ``moe_act`` and ``layernorm`` are element-wise and counted as free).
- ``t_a2a``: the exposed part (``a2a_exposure``, fitted) of the expert-parallel all-to-all of MoE layers: per MoE
  layer on the busiest pipeline rank and per microbatch, dispatch and combine in the forward and again in the
  backward, each moving the rank's tokens x top-k x ``h`` bf16 values, the ``(EP - 1)/EP`` that leave the GPU, at
  NVLink bandwidth when the expert group's ``ETP x EP`` consecutive ranks fit one NVLink domain, else at the
  scale-out bandwidth (``configs/gpu``). Dispatchers that send a token once per node (DeepEP, HybridEP) and overlap
  with other microbatches are what the exposure absorbs.
- ``bubble = (PP - 1) / (VP m)``: the pipeline flush of 1F1B / interleaved 1F1B with ``m`` microbatches
  (Narayanan et al. 2021, arXiv 2104.04473, Sec. 2.2), applied to the per-microbatch work above.
- ``t_overhead = c_layer m L_rank``: a fixed cost per layer per microbatch (launches, host work, small exposed
  collectives) on the pipeline rank with the most layers; ``c_layer`` is fitted (:func:`calibrate`). It carries the
  measured effect of MBS (same GPUs, fewer and larger microbatches -> faster).
- ``t_optimizer``. AdamW with the distributed optimizer: memory bound, :data:`ADAM_BYTES_PER_PARAM` moved per
  locally owned param at HBM bandwidth; the param all-gather and grad reduce-scatter overlap with compute
  (``overlap_param_gather`` / ``overlap_grad_reduce`` in the recipes). Muon, layer-wise (``dist_muon``, megatron-core
  0.19.2 ``optimizer/layer_wise_optimizer.py``): on the busiest GPU, Newton-Schulz FLOPs of the matrices it owns at
  ``ns_efficiency x`` the BF16 peak (``muon_fp32_matmul_prec=medium`` runs NS GEMMs in BF16) plus ``kappa`` per
  matrix (emerging-optimizers ``OrthogonalizedOptimizer.step`` loops over params, ~35 small kernels each: research
  notes ``sweeps_and_compare.md`` Sec. 1.8) -- :func:`muon_rank_loads` reproduces Megatron-Core's ping-pong deal of
  whole params; plus the element-wise update (:data:`MUON_ELEMENTWISE_BYTES` per owned param at HBM bandwidth);
  plus the all-gather of the updated bf16 params, which the legacy layer-wise path does not overlap (26.02 recipes:
  ``overlap_param_gather=False``), as a ring all-gather ``(G - 1)/G x bytes / bw`` over NVLink when the group's
  rank block fits one NVLink domain, else over the scale-out network.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

from bridgebench.errors import BridgebenchError
from bridgebench.model import memory
from bridgebench.model.flops import model_flops
from bridgebench.model.newton_schulz import (
    NSPolicy,
    Parallelism,
    _pp_stage_of_layer,
    _shard,
    muon_matrices,
    per_tp_rank_flops,
)
from bridgebench.model.spec import ModelSpec

#: fused AdamW step: read fp32 master, m, v, grad (16 B), write master, m, v (12 B), write the bf16 param (2 B), and
#: the distributed optimizer's copy of the grad shard into the fp32 buffer (4 B) -> 34 B per owned param.
ADAM_BYTES_PER_PARAM = 34.0
#: Muon element-wise work per owned param outside Newton-Schulz: momentum update, scaling, master update, bf16 cast
#: (read/write fp32 grad, momentum and master).
MUON_ELEMENTWISE_BYTES = 30.0
#: precision peak key (``configs/precision/*.yaml`` ``peak``) -> efficiency class: FP8 and MXFP8 share the FP8 rate.
PRECISION_CLASS = {"bf16": "bf16", "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "nvfp4"}


class TimeModelError(BridgebenchError):
    """A point the time model cannot evaluate (unknown GPU peak, optimizer, or a calibration that does not fit)."""


# ---------------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class GpuFacts:
    """One GPU kind (``configs/gpu/<name>.yaml``): dense peaks in TFLOP/s by peak key, HBM capacity (bytes) and
    bandwidth (bytes/s), NVLink and scale-out bandwidth per GPU per direction (bytes/s), NVLink domain size."""

    name: str
    peak_tflops: Mapping[str, float | None]
    hbm_bytes: float
    hbm_bandwidth: float
    nvlink_bandwidth: float
    network_bandwidth: float
    nvlink_domain: int

    @classmethod
    def from_mapping(cls, gpu: Mapping[str, Any]) -> GpuFacts:
        """From a ``configs/gpu`` mapping (``hbm_gb``, ``hbm_bandwidth_tb_s``, ``nvlink_bandwidth_gb_s``,
        ``network_bandwidth_gb_s``, ``nvlink_domain``, ``peak_tflops``). Raises :class:`TimeModelError` on a
        missing key."""
        try:
            return cls(
                name=str(gpu["name"]),
                peak_tflops=dict(gpu["peak_tflops"]),
                hbm_bytes=float(gpu["hbm_gb"]) * 1e9,
                hbm_bandwidth=float(gpu["hbm_bandwidth_tb_s"]) * 1e12,
                nvlink_bandwidth=float(gpu["nvlink_bandwidth_gb_s"]) * 1e9,
                network_bandwidth=float(gpu["network_bandwidth_gb_s"]) * 1e9,
                nvlink_domain=int(gpu["nvlink_domain"]),
            )
        except KeyError as err:
            raise TimeModelError(f"gpu {gpu.get('name')!r} lacks {err.args[0]!r} (configs/gpu)") from err

    def peak(self, peak_key: str) -> float:
        """Dense peak in FLOP/s for a peak key. Raises :class:`TimeModelError` when the GPU lacks the format."""
        value = self.peak_tflops.get(peak_key)
        if not value:
            raise TimeModelError(f"{self.name} has no {peak_key} tensor-core peak (configs/gpu/{self.name}.yaml)")
        return float(value) * 1e12


@dataclass(frozen=True)
class TimeConfig:
    """One point. ``peak_key`` is the precision's ``configs/precision`` peak key (``bf16 fp8 mxfp8 nvfp4``); sizes
    as in :class:`bridgebench.model.memory.MemoryConfig`; ``optimizer`` a Megatron-Core name (``adam``, ``muon``,
    ``dist_muon``) with its Newton-Schulz policy; ``flops_formula`` the release's FLOPs formula (``v1``/``v2``);
    ``release_index`` an ordinal of the software release (only used by a calibration with a trend term); the
    ``recompute_*`` settings are Megatron-Core's (see :func:`recompute_flops`)."""

    gpu: GpuFacts
    peak_key: str
    num_gpus: int
    mbs: int
    gbs: int
    tp: int = 1
    pp: int = 1
    vp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    pipeline_model_parallel_layout: str | None = None
    optimizer: str = "adam"
    ns_policy: NSPolicy = NSPolicy()
    flops_formula: str = "v2"
    release_index: float | None = None
    sequence_parallel: bool = False
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] = ()
    release: str | None = None  # SHIM (issue 15): the NeMo release the prediction is for, echoed in TimeBreakdown

    @property
    def dp(self) -> int:
        return self.num_gpus // (self.tp * self.pp * self.cp)

    @property
    def edp(self) -> int:
        return self.num_gpus // ((self.etp or self.tp) * self.ep * self.pp)

    @property
    def microbatches(self) -> int:
        return max(1, self.gbs // (self.mbs * self.dp))

    @property
    def precision_class(self) -> str:
        return PRECISION_CLASS.get(self.peak_key, self.peak_key)

    def parallelism(self) -> Parallelism:
        return Parallelism(
            num_gpus=self.num_gpus,
            tensor_model_parallel_size=self.tp,
            pipeline_model_parallel_size=self.pp,
            virtual_pipeline_model_parallel_size=self.vp,
            context_parallel_size=self.cp,
            expert_model_parallel_size=self.ep,
            expert_tensor_parallel_size=self.etp,
            pipeline_model_parallel_layout=self.pipeline_model_parallel_layout,
        )


def group_key(spec: ModelSpec, cfg: TimeConfig) -> tuple[str, str, str]:
    """The published-table group of a point: (``configs/model`` name, ``configs/gpu`` name, peak key)."""
    return (spec.name, cfg.gpu.name, cfg.peak_key)


def family(spec: ModelSpec) -> str:
    """Calibration family of a model: ``moe`` or ``dense`` (MLA and GQA MoE share one)."""
    return "moe" if spec.is_moe else "dense"


@dataclass(frozen=True)
class GroupLevel:
    """The software level of one published (model, GPU, peak key) group: its efficiency over the family efficiency,
    ``exp(level + slope (release_index - origin))``.

    ``origin`` is the mean release index of the group's fitted rows (a point with no release index is taken there),
    ``level`` the mean log ratio, ``slope`` the log gain per release step: the group's own least-squares slope shrunk
    towards the pooled within-group slope, ``(Sxy + k b0) / (Sxx + k)`` with ``k`` = :attr:`Calibration.group_shrinkage`
    (empirical Bayes, :func:`fit_group_levels`); ``rows`` = published rows behind it."""

    origin: float
    level: float
    slope: float
    rows: int

    def log_factor(self, release_index: float | None) -> float:
        x = self.origin if release_index is None else release_index
        return self.level + self.slope * (x - self.origin)


@dataclass
class Calibration:
    """Fitted constants (``configs/calibration/<name>.yaml``, written by ``bridgebench calibrate``).

    ``efficiency[(gpu, precision class, family)]``: fraction of the dense peak the model FLOPs run at;
    ``c_layer`` (s per layer per microbatch); ``a2a_exposure`` (fraction of the expert-parallel all-to-all not
    hidden behind compute); ``kappa`` (s per Muon matrix); ``ns_efficiency`` (fraction of the
    BF16 peak for NS GEMMs); ``trend`` (fractional efficiency gain per release step, 0 = none) around
    ``trend_origin``; ``rows`` = published rows behind each efficiency; ``default_efficiency`` for a key with no
    fitted value and no sibling (same precision class and family) to average; ``groups[(model, gpu, peak key)]``
    the software level of each published group (:class:`GroupLevel`), ``group_slope`` the pooled within-group slope
    ``b0`` and ``group_shrinkage`` the prior weight ``k`` (release steps squared; ``inf`` = every group on ``b0``).
    """

    efficiency: dict[tuple[str, str, str], float] = field(default_factory=dict)
    c_layer: float = 0.0
    a2a_exposure: float = 1.0
    kappa: float = 1.4e-4
    ns_efficiency: float = 0.5
    trend: float = 0.0
    trend_origin: float = 0.0
    rows: dict[tuple[str, str, str], int] = field(default_factory=dict)
    default_efficiency: float = 0.35
    groups: dict[tuple[str, str, str], GroupLevel] = field(default_factory=dict)
    group_slope: float = 0.0
    group_shrinkage: float = math.inf

    def efficiency_of(
        self,
        gpu: str,
        pclass: str,
        fam: str,
        release_index: float | None = None,
        group: tuple[str, str, str] | None = None,
    ) -> tuple[float, str]:
        """(efficiency, where it came from: ``fitted`` / ``sibling mean`` / ``default``, with ``+ group`` when the
        (model, GPU, peak key) ``group`` has a fitted software level)."""
        value, source = self.efficiency.get((gpu, pclass, fam)), "fitted"
        if value is None:
            same = [v for (_, p, f), v in self.efficiency.items() if p == pclass and f == fam]
            value, source = (sum(same) / len(same), "sibling mean") if same else (self.default_efficiency, "default")
        if self.trend and release_index is not None:
            value *= math.exp(self.trend * (release_index - self.trend_origin))
        level = self.groups.get(group) if group is not None else None
        if level is not None:
            value *= math.exp(level.log_factor(release_index))
            source += " + group"
        return value, source

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Calibration:
        """From the ``time`` node of a calibration YAML (``efficiency: {gpu: {class: {family: value}}}``).

        Raises:
            TimeModelError: a non-positive constant or efficiency.
        """
        eff, rows = {}, {}
        for gpu, by_class in (data.get("efficiency") or {}).items():
            for pclass, by_family in by_class.items():
                for fam, value in by_family.items():
                    if isinstance(value, Mapping):
                        rows[(gpu, pclass, fam)] = int(value.get("rows", 0))
                        value = value["value"]
                    eff[(gpu, pclass, fam)] = float(value)
        groups = {
            (model, gpu, key): GroupLevel(float(g["origin"]), float(g["level"]), float(g["slope"]), int(g["rows"]))
            for model, by_gpu in (data.get("groups") or {}).items()
            for gpu, by_key in by_gpu.items()
            for key, g in by_key.items()
        }
        cal = cls(
            efficiency=eff,
            c_layer=float(data.get("c_layer_s", 0.0)),
            a2a_exposure=float(data.get("a2a_exposure", 1.0)),
            kappa=float(data.get("kappa_s", 1.4e-4)),
            ns_efficiency=float(data.get("ns_efficiency", 0.5)),
            trend=float(data.get("trend", 0.0)),
            trend_origin=float(data.get("trend_origin", 0.0)),
            rows=rows,
            default_efficiency=float(data.get("default_efficiency", 0.35)),
            groups=groups,
            group_slope=float(data.get("group_slope", 0.0)),
            group_shrinkage=float(data.get("group_shrinkage", math.inf)),
        )
        bad = {k: v for k, v in eff.items() if not v > 0} | {
            k: getattr(cal, k) for k in ("kappa", "ns_efficiency", "default_efficiency") if not getattr(cal, k) > 0
        }
        if bad or cal.c_layer < 0 or not 0 <= cal.a2a_exposure <= 1 or not cal.group_shrinkage >= 0:
            rest = {"c_layer_s": cal.c_layer, "a2a_exposure": cal.a2a_exposure, "group_shrinkage": cal.group_shrinkage}
            raise TimeModelError(
                f"calibration constants must be positive (a2a_exposure in [0, 1], group_shrinkage >= 0), got "
                f"{bad or rest}"
            )
        return cal

    def to_mapping(self) -> dict[str, Any]:
        """The ``time`` node of a calibration YAML (inverse of :meth:`from_mapping`)."""
        eff: dict[str, dict[str, dict[str, Any]]] = {}
        for (gpu, pclass, fam), value in sorted(self.efficiency.items()):
            eff.setdefault(gpu, {}).setdefault(pclass, {})[fam] = {
                "value": round(value, 6),
                "rows": self.rows.get((gpu, pclass, fam), 0),
            }
        groups: dict[str, dict[str, dict[str, Any]]] = {}
        for (model, gpu, key), g in sorted(self.groups.items()):
            groups.setdefault(model, {}).setdefault(gpu, {})[key] = {
                "origin": g.origin,
                "level": round(g.level, 6),
                "slope": round(g.slope, 6),
                "rows": g.rows,
            }
        return {
            "c_layer_s": self.c_layer,
            "a2a_exposure": self.a2a_exposure,
            "kappa_s": self.kappa,
            "ns_efficiency": self.ns_efficiency,
            "trend": self.trend,
            "trend_origin": self.trend_origin,
            "default_efficiency": self.default_efficiency,
            "efficiency": eff,
            "group_slope": self.group_slope,
            "group_shrinkage": self.group_shrinkage,
            "groups": groups,
        }


@dataclass(frozen=True)
class TimeBreakdown:
    """Seconds per step: ``compute`` (model FLOPs at the calibrated rate), ``recompute``, ``a2a`` (expert-parallel
    all-to-all), ``bubble``, ``overhead``, ``optimizer`` (of which ``ns``, ``per_matrix``, ``allgather``,
    ``elementwise``); ``flops`` model FLOPs per step;
    ``tflops_per_gpu = flops / total / num_gpus / 1e12`` (model FLOPs only, like NVIDIA's tables);
    ``efficiency_source`` says whether the efficiency was fitted for this GPU / precision / family."""

    compute: float
    bubble: float
    overhead: float
    optimizer: float
    flops: float
    num_gpus: int
    recompute: float = 0.0
    a2a: float = 0.0
    ns: float = 0.0
    per_matrix: float = 0.0
    allgather: float = 0.0
    elementwise: float = 0.0
    busiest_matrices: int = 0
    busiest_ns_flops: float = 0.0
    efficiency: float = 0.0
    efficiency_source: str = ""
    band_pct: float = 0.0  # SHIM (issue 15): +- band of the prediction, percent (HELD_OUT_MAPE)
    release: str = ""  # SHIM (issue 15): the release the prediction is for (TimeConfig.release)

    @property
    def total(self) -> float:
        return self.compute + self.recompute + self.a2a + self.bubble + self.overhead + self.optimizer

    @property
    def terms(self) -> dict[str, float]:
        """SHIM (issue 15): seconds per additive term (they sum to ``total``)."""
        return {
            "compute": self.compute,
            "recompute": self.recompute,
            "a2a": self.a2a,
            "bubble": self.bubble,
            "overhead": self.overhead,
            "optimizer": self.optimizer,
        }

    @property
    def tflops_per_gpu(self) -> float:
        return self.flops / self.total / self.num_gpus / 1e12


# ---------------------------------------------------------------------------------------------------- Muon loads
_SPECS: dict[int, ModelSpec] = {}


def _sid(spec: ModelSpec) -> int:
    _SPECS[id(spec)] = spec
    return id(spec)


@dataclass(frozen=True)
class _LayerParams:
    """Muon params of one decoder (or MTP) layer per TP rank: dense ``(flops, numel, pieces)`` per param in matrix
    order, and one routed expert's ``(flops, numel, pieces)`` per param (experts of a layer share shapes)."""

    dense: tuple[tuple[int, int, int], ...]
    expert: tuple[tuple[int, int, int], ...]


@lru_cache(maxsize=64)
def _first_expert_matrices(sid: int, split_qkv: bool) -> tuple:
    """The model's Muon matrices without routed experts 1..E-1 (they repeat expert 0's shapes)."""
    return tuple(
        m for m in muon_matrices(_SPECS[sid], split_qkv=split_qkv) if not m.is_expert or m.name.endswith(".weight0")
    )


@lru_cache(maxsize=512)
def _layer_params(sid: int, split_qkv: bool, tp: int, etp: int, steps: int, kernel: str, tp_mode: str):
    policy = NSPolicy(num_ns_steps=steps, kernel=kernel, tp_mode=tp_mode, split_qkv=split_qkv)
    per_layer: dict[int, tuple[dict, dict]] = {}
    for m in _first_expert_matrices(sid, split_qkv):
        dense, expert = per_layer.setdefault(m.layer, ({}, {}))
        if m.is_expert:
            key, t, target = m.param.rsplit("weight", 1)[0], etp, expert
        else:
            key, t, target = m.param, tp, dense
        r, c = _shard(m, t)
        f, n, k = target.get(key, (0, 0, 0))
        target[key] = (f + per_tp_rank_flops(m, t, policy), n + r * c, k + 1)
    return {layer: _LayerParams(tuple(d.values()), tuple(e.values())) for layer, (d, e) in per_layer.items()}


def _deal(runs: list[tuple[int, int, int, int]], group: int, mode: str) -> list[tuple[int, int]]:
    """(NS FLOPs, matrices) per rank of one group for runs of identical params ``(flops, numel, pieces, count)``.

    ``ping_pong``: Megatron-Core's order -- sorted by numel ascending (stable), dealt ``0..G-1, G-1..0`` one param
    at a time (megatron-core 0.19.2 ``layer_wise_optimizer.py::_shard_params_ping_pong``), a run of ``c`` params
    as full periods of ``2G`` positions (two per rank) plus the leftover positions; ``cost_balanced``: largest NS
    cost first to the least-loaded rank (LPT; Megatron-LM PR #6379 balances by NS cost); ``replicated``: every rank
    does every param (non-distributed Muon).
    """
    if mode == "replicated" or group == 1:
        whole = (sum(f * c for f, _, _, c in runs), sum(k * c for _, _, k, c in runs))
        return [whole] * group
    flops = [0] * group
    mats = [0] * group
    if mode == "ping_pong":
        period = 2 * group
        pos = 0
        for f, _, k, c in sorted(runs, key=lambda x: x[1]):
            full, rest = divmod(c, period)
            if full:
                for r in range(group):
                    flops[r] += 2 * full * f
                    mats[r] += 2 * full * k
            for j in range(rest):
                q = (pos + j) % period
                r = q if q < group else period - 1 - q
                flops[r] += f
                mats[r] += k
            pos = (pos + c) % period
    else:
        for f, _, k, c in sorted(runs, key=lambda x: -x[0]):
            for _ in range(c):
                r = min(range(group), key=flops.__getitem__)
                flops[r] += f
                mats[r] += k
    return list(zip(flops, mats))


@dataclass(frozen=True)
class MuonRankLoads:
    """NS FLOPs and Muon matrices (QKV pieces counted separately) per GPU for one optimizer step, GPUs in rank order
    within each pipeline stage (``stage * N/PP + g``), under one assignment of whole params to ranks."""

    ns_flops: tuple[int, ...]
    matrices: tuple[int, ...]
    assignment: str

    def times(self, ns_rate: float, kappa: float) -> list[float]:
        """Seconds per GPU: ``ns_flops / ns_rate + kappa x matrices``."""
        return [f / ns_rate + kappa * k for f, k in zip(self.ns_flops, self.matrices)]


@lru_cache(maxsize=8192)
def _muon_rank_loads(sid: int, par: Parallelism, policy: NSPolicy, assignment: str) -> MuonRankLoads:
    spec = _SPECS[sid]
    dp, edp = par.dp, par.expert_dp  # validates the grids
    stage_of = _pp_stage_of_layer(spec, par)
    layers = _layer_params(sid, policy.split_qkv, par.tp, par.etp, policy.num_ns_steps, policy.kernel, policy.tp_mode)
    local_experts = spec.num_moe_experts // par.ep if spec.is_moe else 0
    mode = assignment if policy.layer_wise else "replicated"
    dense_items: list[list] = [[] for _ in range(par.pp)]
    expert_items: list[list] = [[] for _ in range(par.pp)]
    for layer, lp in sorted(layers.items()):
        st = stage_of[layer]
        dense_items[st] += [(f, n, k, 1) for f, n, k in lp.dense]
        if local_experts:
            expert_items[st] += [(f, n, k, local_experts) for f, n, k in lp.expert]
    group = dp * par.cp
    per_stage = par.num_gpus // par.pp
    flops: list[int] = []
    mats: list[int] = []
    for st in range(par.pp):
        dense = _deal(dense_items[st], group, mode)
        experts = _deal(expert_items[st], edp, mode) if expert_items[st] else [(0, 0)] * edp
        for g in range(per_stage):
            d = dense[g // par.tp]
            e = experts[g // (par.etp * par.ep)]
            flops.append(d[0] + e[0])
            mats.append(d[1] + e[1])
    return MuonRankLoads(tuple(flops), tuple(mats), assignment)


def muon_rank_loads(
    spec: ModelSpec, par: Parallelism, policy: NSPolicy = NSPolicy(), assignment: str = "ping_pong"
) -> MuonRankLoads:
    """NS FLOPs and matrices per GPU of one Muon step (see :class:`MuonRankLoads`, :func:`_deal`).

    Same counting as :func:`bridgebench.model.newton_schulz.ns_load` (its ``per_gpu_max`` and ``total`` equal
    ``max`` and ``sum`` of ``ns_flops`` here, checked in tests), computed per layer instead of per matrix so that a
    sweep can afford it, and with the per-GPU matrix counts the time model needs.

    Raises:
        bridgebench.model.newton_schulz.NSError: parallel sizes that do not fit the world size or the matrices.
        TimeModelError: an unknown assignment.
    """
    if assignment not in ("ping_pong", "cost_balanced"):
        raise TimeModelError(f"assignment must be 'ping_pong' or 'cost_balanced', got {assignment!r}")
    return _muon_rank_loads(_sid(spec), par, policy, assignment)


# ---------------------------------------------------------------------------------------------------- helpers
@lru_cache(maxsize=8192)
def _flops(sid: int, gbs: int, tp: int, formula: str) -> float:
    return float(model_flops(_SPECS[sid], gbs, tensor_model_parallel_size=tp, formula=formula).total)


@lru_cache(maxsize=8192)
def _layers_per_rank(num_layers: int, mtp: int, pp: int, vp: int | None, layout: str | None) -> int:
    ranks = memory.stage_chunks(num_layers, mtp, pp, vp, layout)
    return max(sum(len(ch[0]) for ch in chunks) for chunks in ranks)


@lru_cache(maxsize=8192)
def _local_params(sid: int, tp: int, pp: int, vp: int | None, ep: int, etp: int, layout: str | None) -> tuple:
    """(dense params, routed-expert params) on one GPU of each pipeline rank (elements)."""
    spec = _SPECS[sid]
    cfg = memory.MemoryConfig(
        num_gpus=tp * pp * ep * etp, mbs=1, gbs=1, tp=tp, pp=pp, vp=vp, ep=ep, etp=etp,
        pipeline_model_parallel_layout=layout,
    )  # fmt: skip
    return tuple(memory.parameter_counts(spec, cfg))


@lru_cache(maxsize=8192)
def _moe_layers_per_rank(sid: int, pp: int, vp: int | None, layout: str | None) -> int:
    """MoE layers (decoder + MTP) on the pipeline rank that holds the most."""
    spec = _SPECS[sid]
    kinds = memory.model_tables(spec).layer_kinds
    ranks = memory.stage_chunks(spec.num_layers, spec.mtp_layers, pp, vp, layout)
    return max(sum(kinds[li] for ch in chunks for li in ch[0]) for chunks in ranks)


def recompute_flops(spec: ModelSpec, cfg: TimeConfig) -> float:
    """Forward FLOPs per step that activation recomputation repeats (all GPUs together).

    ``full``: a third (the forward) of every recomputed layer's forward + backward FLOPs -- all layers with the
    ``uniform`` method, ``recompute_num_layers`` of each virtual chunk's layers with ``block``. ``selective``: the
    forward of each recomputed module -- ``core_attn`` the attention core, ``mla_up_proj`` the MLA q/kv
    up-projections (``2 (q_lora n (qk + rope) + kv_lora n (qk + v))`` per token and layer), ``mlp`` the dense MLPs,
    ``moe`` the routed and shared experts, ``shared_experts`` the shared ones; ``moe_act`` and ``layernorm`` are
    element-wise (no FLOPs counted). Terms from :func:`bridgebench.model.flops.model_flops` (Megatron-Bridge's
    ``flop_utils.py``).
    """
    granularity = cfg.recompute_granularity
    if granularity not in ("full", "selective"):
        return 0.0
    f = model_flops(spec, cfg.gbs, tensor_model_parallel_size=cfg.tp, formula=cfg.flops_formula)
    layer_terms = f.attention_projections + f.attention_core + f.mlp_dense + f.mlp_routed_experts
    layer_terms += f.mlp_shared_experts
    if granularity == "full":
        share = 1.0
        if cfg.recompute_method == "block":
            chunks = cfg.pp * (cfg.vp or 1)
            per_chunk = (spec.num_layers + spec.mtp_layers) / chunks
            share = min(1.0, (cfg.recompute_num_layers or 1) / per_chunk)
        return float(layer_terms) / 3 * share
    mods = set(cfg.recompute_modules)
    out = 0.0
    if "core_attn" in mods:
        out += float(f.attention_core) / 3
    if "mla_up_proj" in mods and spec.multi_latent_attention:
        n, qk, rope, v = spec.num_attention_heads, spec.qk_head_dim, spec.qk_pos_emb_head_dim, spec.v_head_dim
        per_token = 2 * ((spec.q_lora_rank or 0) * n * (qk + rope) + spec.kv_lora_rank * n * (qk + v))
        out += per_token * (spec.num_layers + spec.mtp_layers) * f.tokens
    if "mlp" in mods:
        out += float(f.mlp_dense) / 3
    if "moe" in mods:
        out += float(f.mlp_routed_experts + f.mlp_shared_experts) / 3
    elif "shared_experts" in mods:
        out += float(f.mlp_shared_experts) / 3
    return out


def a2a_seconds(spec: ModelSpec, cfg: TimeConfig) -> float:
    """Expert-parallel all-to-all seconds per step on the busiest pipeline rank (see the module docstring)."""
    if not spec.is_moe or cfg.ep <= 1:
        return 0.0
    etp = cfg.etp or cfg.tp
    tokens = cfg.mbs * spec.seq_length / (cfg.cp * cfg.tp)  # tokens one GPU dispatches per microbatch
    volume = tokens * spec.moe_router_topk * spec.hidden_size * 2.0 * (cfg.ep - 1) / cfg.ep
    span = etp * cfg.ep
    bw = cfg.gpu.nvlink_bandwidth if span <= cfg.gpu.nvlink_domain else cfg.gpu.network_bandwidth
    layers = _moe_layers_per_rank(_sid(spec), cfg.pp, cfg.vp, cfg.pipeline_model_parallel_layout)
    return 4 * volume / bw * layers * cfg.microbatches


def _group_bandwidth(cfg: TimeConfig) -> float:
    """Bandwidth of a data-parallel group: its ranks lie in one block of ``N / PP`` consecutive ranks (Megatron's
    rank order tp-cp-ep-dp-pp), so NVLink when that block fits one NVLink domain, else the scale-out network."""
    return cfg.gpu.nvlink_bandwidth if cfg.num_gpus // cfg.pp <= cfg.gpu.nvlink_domain else cfg.gpu.network_bandwidth


def allgather_seconds(total_bytes: float, group: int, bandwidth: float) -> float:
    """Ring all-gather of ``total_bytes`` (the gathered size) over ``group`` ranks: ``(G - 1)/G x bytes / bw``."""
    return 0.0 if group <= 1 else (group - 1) / group * total_bytes / bandwidth


# ---------------------------------------------------------------------------------------------------- predict
#: SHIM (issue 15): held-out MAPE of the shipped calibration on the published rows, leave one release out
#: (docs/sweeps.md "Time", benchmarks/validate_time.py: 9.7 %), the +- band of every prediction until the time model
#: carries its own cross-validated bands.
HELD_OUT_MAPE = 0.097


def predict_time(spec: ModelSpec, cfg: TimeConfig, calib: Calibration) -> TimeBreakdown:
    """Predicted step time (s) and model TFLOP/s/GPU of one point; see the module docstring for each term.

    Raises:
        TimeModelError: no peak for the precision on this GPU, or an unknown optimizer.
        bridgebench.model.newton_schulz.NSError: parallel sizes that do not fit (Muon).
    """
    sid = _sid(spec)
    flops = _flops(sid, cfg.gbs, cfg.tp, cfg.flops_formula)
    peak = cfg.gpu.peak(cfg.peak_key)
    eff, eff_source = calib.efficiency_of(
        cfg.gpu.name, cfg.precision_class, family(spec), cfg.release_index, group_key(spec, cfg)
    )
    compute = flops / cfg.num_gpus / (peak * eff)
    recompute = recompute_flops(spec, cfg) / cfg.num_gpus / (peak * eff)
    a2a = a2a_seconds(spec, cfg) * calib.a2a_exposure
    m = cfg.microbatches
    bubble = (compute + recompute + a2a) * _bubble_factor(cfg)
    layout = cfg.pipeline_model_parallel_layout
    overhead = calib.c_layer * m * _layers_per_rank(spec.num_layers, spec.mtp_layers, cfg.pp, cfg.vp, layout)
    etp = cfg.etp or cfg.tp
    per_stage = _local_params(sid, cfg.tp, cfg.pp, cfg.vp, cfg.ep, etp, layout)
    group, egroup = cfg.dp * cfg.cp, cfg.edp
    owned = max(d / group + e / egroup for d, e in per_stage)
    ns = per_matrix = ag = elem = 0.0
    nmat, ns_flops = 0, 0.0
    if cfg.optimizer == "adam":
        opt = ADAM_BYTES_PER_PARAM * owned / cfg.gpu.hbm_bandwidth
    elif cfg.optimizer in ("dist_muon", "muon"):
        policy = NSPolicy(
            num_ns_steps=cfg.ns_policy.num_ns_steps,
            kernel=cfg.ns_policy.kernel,
            tp_mode=cfg.ns_policy.tp_mode,
            layer_wise=cfg.optimizer == "dist_muon",
            split_qkv=cfg.ns_policy.split_qkv,
        )
        loads = muon_rank_loads(spec, cfg.parallelism(), policy)
        rate = cfg.gpu.peak("bf16") * calib.ns_efficiency
        times = loads.times(rate, calib.kappa)
        busiest = max(range(len(times)), key=times.__getitem__)
        ns_flops, nmat = float(loads.ns_flops[busiest]), loads.matrices[busiest]
        ns, per_matrix = ns_flops / rate, calib.kappa * nmat
        if cfg.optimizer == "dist_muon":
            elem = MUON_ELEMENTWISE_BYTES * owned / cfg.gpu.hbm_bandwidth
            bw = _group_bandwidth(cfg)
            dense, expert = max(per_stage, key=lambda x: x[0] + x[1])
            ag = allgather_seconds(2.0 * dense, group, bw) + allgather_seconds(2.0 * expert, egroup, bw)
        else:  # every rank updates every param, no gather
            elem = MUON_ELEMENTWISE_BYTES * max(d + e for d, e in per_stage) / cfg.gpu.hbm_bandwidth
        opt = ns + per_matrix + elem + ag
    else:
        raise TimeModelError(f"unknown optimizer {cfg.optimizer!r}; the time model knows adam, muon, dist_muon")
    return TimeBreakdown(
        compute, bubble, overhead, opt, flops, cfg.num_gpus, recompute, a2a, ns, per_matrix, ag, elem, nmat, ns_flops,
        eff, eff_source, 100.0 * HELD_OUT_MAPE, cfg.release or "",
    )  # fmt: skip


def _bubble_factor(cfg: TimeConfig) -> float:
    return (cfg.pp - 1) / ((cfg.vp or 1) * cfg.microbatches) if cfg.pp > 1 else 0.0


# ---------------------------------------------------------------------------------------------------- Muon cost
@dataclass(frozen=True)
class MuonCost:
    """The Muon overhead of one point (s and FLOPs per step, bytes): NS FLOPs per GPU under Megatron-Core's
    ping-pong deal (``ping_pong``) and under a cost-balanced deal (``balanced``), the time of the busiest GPU under
    each, the bf16 params each GPU gathers after the step (``allgather_bytes``: its stage's dense params over the
    DP x CP group, its experts over the expert-DP group) and that time, and the predicted Muon / AdamW step times."""

    ping_pong: MuonRankLoads
    balanced: MuonRankLoads
    ns_rate: float
    kappa: float
    allgather_bytes: float
    allgather_s: float
    elementwise_s: float
    muon: TimeBreakdown
    adam: TimeBreakdown

    def busiest_s(self, loads: MuonRankLoads) -> float:
        return max(loads.times(self.ns_rate, self.kappa))

    def mean_s(self, loads: MuonRankLoads) -> float:
        times = loads.times(self.ns_rate, self.kappa)
        return sum(times) / len(times)

    @property
    def ratio(self) -> float:
        """Predicted Muon / AdamW step-time ratio."""
        return self.muon.total / self.adam.total

    @property
    def balanced_step_s(self) -> float:
        """Predicted Muon step time with the cost-balanced assignment instead of Megatron-Core's order."""
        return self.muon.total - self.busiest_s(self.ping_pong) + self.busiest_s(self.balanced)


def muon_cost(spec: ModelSpec, cfg: TimeConfig, calib: Calibration) -> MuonCost:
    """The Muon overhead model of one point (``cfg.optimizer`` is taken as ``dist_muon`` unless it is ``muon``).

    Raises:
        TimeModelError, bridgebench.model.newton_schulz.NSError: as :func:`predict_time`.
    """
    import dataclasses

    opt = cfg.optimizer if cfg.optimizer in ("muon", "dist_muon") else "dist_muon"
    muon = predict_time(spec, dataclasses.replace(cfg, optimizer=opt), calib)
    adam = predict_time(spec, dataclasses.replace(cfg, optimizer="adam"), calib)
    policy = dataclasses.replace(cfg.ns_policy, layer_wise=opt == "dist_muon")
    par = cfg.parallelism()
    etp = cfg.etp or cfg.tp
    per_stage = _local_params(_sid(spec), cfg.tp, cfg.pp, cfg.vp, cfg.ep, etp, cfg.pipeline_model_parallel_layout)
    dense, expert = max(per_stage, key=lambda x: x[0] + x[1])
    group, egroup = cfg.dp * cfg.cp, cfg.edp  # a group of one gathers nothing (Kimi K2 on 256 GPUs: EDP = 1)
    volume = 2.0 * (dense * (group > 1) + expert * (egroup > 1)) if opt == "dist_muon" else 0.0
    return MuonCost(
        ping_pong=muon_rank_loads(spec, par, policy, "ping_pong"),
        balanced=muon_rank_loads(spec, par, policy, "cost_balanced"),
        ns_rate=cfg.gpu.peak("bf16") * calib.ns_efficiency,
        kappa=calib.kappa,
        allgather_bytes=volume,
        allgather_s=muon.allgather,
        elementwise_s=muon.elementwise,
        muon=muon,
        adam=adam,
    )


# ---------------------------------------------------------------------------------------------------- calibrate
@dataclass(frozen=True)
class Row:
    """One published row for calibration: model, point, published model TFLOP/s/GPU, and labels."""

    spec: ModelSpec
    cfg: TimeConfig
    tflops: float
    release: str = ""
    model: str = ""
    system: str = ""
    precision: str = ""


#: grid of ``c_layer`` values (s per layer per microbatch) tried by :func:`calibrate`.
C_LAYER_GRID = (0.0, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 4e-4, 8e-4)
#: grid of ``a2a_exposure`` values (fraction of the expert-parallel all-to-all not hidden) tried by :func:`calibrate`.
A2A_EXPOSURE_GRID = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)


def _implied_efficiency(r: Row, cal: Calibration) -> float | None:
    """Efficiency that makes the prediction equal the published TFLOP/s (None when overheads alone exceed it)."""
    probe = Calibration(
        c_layer=cal.c_layer,
        a2a_exposure=cal.a2a_exposure,
        kappa=cal.kappa,
        ns_efficiency=cal.ns_efficiency,
        default_efficiency=1.0,
    )
    t = predict_time(r.spec, r.cfg, probe)  # compute and recompute times at efficiency 1
    target = t.flops / r.cfg.num_gpus / (r.tflops * 1e12)
    # target = (C1 / e + a2a) (1 + b) + overhead + optimizer, solved for e
    rest = (target - t.overhead - t.optimizer) / (1 + _bubble_factor(r.cfg)) - t.a2a
    return None if rest <= 0 else (t.compute + t.recompute) / rest


def fit_group_levels(
    rows: Sequence[Row], cal: Calibration, shrinkage: float | None = None
) -> tuple[dict[tuple[str, str, str], GroupLevel], float, float]:
    """The software level of each (model, GPU, peak key) group of ``rows`` over ``cal``'s family efficiencies.

    Each row's residual is ``log(implied efficiency / family efficiency)`` at its release (rows whose overheads
    alone exceed their step are left out). Per group ``g`` with release indices ``x`` and residuals ``y``:
    ``level`` = mean ``y``, ``origin`` = mean ``x``, ``slope = (Sxy + k b0) / (Sxx + k)`` -- the group's own
    least-squares slope shrunk towards the pooled within-group slope ``b0 = sum Sxy / sum Sxx`` (partial pooling,
    the posterior mean of a slope with a normal prior; Gelman and Hill 2007, "Data Analysis Using Regression and
    Multilevel/Hierarchical Models", Sec. 12.2). ``k = sigma^2 / tau^2`` unless ``shrinkage`` is given: ``sigma^2``
    the residual variance about each group's own line (groups of >= 3 rows at >= 2 releases), ``tau^2`` the variance
    of their own slopes less the mean sampling variance ``sigma^2 / Sxx`` (method of moments); ``tau^2 <= 0`` gives
    ``k = inf``: every group on ``b0``.

    Returns:
        (groups, b0 in log per release step, k in release steps squared).
    """
    by_group: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for r in rows:
        e = _implied_efficiency(r, cal)
        if e is None:
            continue
        x = r.cfg.release_index or 0.0
        base, _ = cal.efficiency_of(r.cfg.gpu.name, r.cfg.precision_class, family(r.spec), x)
        by_group.setdefault(group_key(r.spec, r.cfg), []).append((x, math.log(e / base)))
    stats = {}
    for key, pts in by_group.items():
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        sxy = sum((x - mx) * (y - my) for x, y in pts)
        stats[key] = (mx, my, sxx, sxy, pts)
    total_sxx = sum(v[2] for v in stats.values())
    b0 = sum(v[3] for v in stats.values()) / total_sxx if total_sxx else 0.0
    k = shrinkage
    if k is None:
        own = [(v[3] / v[2], v) for v in stats.values() if len(v[4]) >= 3 and v[2] > 0]
        dof = sum(len(v[4]) - 2 for _, v in own)
        ss = sum((y - v[1] - b * (x - v[0])) ** 2 for b, v in own for x, y in v[4])
        sigma2 = ss / dof if dof else 0.0
        if len(own) > 1 and sigma2 > 0:
            slopes = [b for b, _ in own]
            mean_b = sum(slopes) / len(slopes)
            tau2 = sum((b - mean_b) ** 2 for b in slopes) / len(slopes) - sum(sigma2 / v[2] for _, v in own) / len(own)
            k = sigma2 / tau2 if tau2 > 0 else math.inf
        else:
            k = math.inf
    groups = {}
    for key, (mx, my, sxx, sxy, pts) in stats.items():
        slope = b0 if math.isinf(k) or sxx + k == 0 else (sxy + k * b0) / (sxx + k)
        groups[key] = GroupLevel(mx, my, slope, len(pts))
    return groups, b0, k


def calibrate(
    rows: Sequence[Row],
    *,
    c_grid: Iterable[float] = C_LAYER_GRID,
    a2a_grid: Iterable[float] = A2A_EXPOSURE_GRID,
    trend: bool = False,
    groups: bool = True,
    group_shrinkage: float | None = None,
    kappa: float = 1.4e-4,
    ns_efficiency: float = 0.5,
    default_efficiency: float = 0.35,
) -> Calibration:
    """Fit the efficiency of each (GPU, precision class, family) and the global ``c_layer`` and ``a2a_exposure``.

    For each (``c_layer``, ``a2a_exposure``) on the grids, a group's efficiency is the geometric mean of the
    efficiencies that make each of its rows hit its published TFLOP/s exactly (rows whose overheads alone exceed
    their step are left out of that group); the pair with the least squared log error over ALL rows wins. With
    ``trend`` a common exponential gain per release step is fitted first (least squares of the within-group log
    efficiencies on the centred release ordinal). ``kappa`` and ``ns_efficiency`` are not fitted
    (the published rows carry no Muon-only information beyond Kimi K2's): they are first-principles values, see
    ``configs/calibration/default.yaml``. With ``groups`` (default) the software level of each (model, GPU, peak
    key) group is fitted last, on the chosen constants (:func:`fit_group_levels`, ``group_shrinkage`` = its ``k``,
    None = estimated): the grid choice, and so the configuration physics a sweep ranks by, does not depend on it.

    Raises:
        TimeModelError: no row whose overheads leave room for compute.
    """
    best: tuple[float, Calibration] | None = None
    for c, exposure in itertools.product(c_grid, a2a_grid):
        cal = Calibration(
            c_layer=c,
            a2a_exposure=exposure,
            kappa=kappa,
            ns_efficiency=ns_efficiency,
            default_efficiency=default_efficiency,
        )
        implied: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
        if trend:  # efficiencies are stored at the mean release of the rows, so a default one needs no shift
            indices = [r.cfg.release_index or 0.0 for r in rows]
            cal.trend_origin = sum(indices) / len(indices)
        for r in rows:
            e = _implied_efficiency(r, cal)
            if e is not None:
                key = (r.cfg.gpu.name, r.cfg.precision_class, family(r.spec))
                x = (r.cfg.release_index or 0.0) - cal.trend_origin
                implied.setdefault(key, []).append((math.log(e), x))
        if not implied:
            continue
        if trend:
            xs, ys = [], []
            for values in implied.values():
                mean_y = sum(v for v, _ in values) / len(values)
                mean_x = sum(x for _, x in values) / len(values)
                xs += [x - mean_x for _, x in values]
                ys += [v - mean_y for v, _ in values]
            den = sum(x * x for x in xs)
            cal.trend = sum(x * y for x, y in zip(xs, ys)) / den if den else 0.0
        for key, values in implied.items():
            cal.efficiency[key] = math.exp(sum(v - cal.trend * x for v, x in values) / len(values))
            cal.rows[key] = len(values)
        err = sum(math.log(predict_time(r.spec, r.cfg, cal).tflops_per_gpu / r.tflops) ** 2 for r in rows)
        if best is None or err < best[0]:
            best = (err, cal)
    if best is None:
        raise TimeModelError("no usable calibration rows (overheads exceed every row's step time)")
    cal = best[1]
    if groups:
        cal.groups, cal.group_slope, cal.group_shrinkage = fit_group_levels(rows, cal, group_shrinkage)
    return cal
