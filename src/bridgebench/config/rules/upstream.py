"""Start-up assertions of Megatron-Core, Megatron-Bridge's performance launcher and the MoE dispatchers for the knobs
bridgebench sweeps, each with the file and tag it came from.

Pure Python (stdlib and :mod:`bridgebench.model`; no torch, megatron, Hydra or OmegaConf import): the sweep judges
thousands of points with them. :func:`bridgebench.config.rules.check` calls :func:`upstream_violations`; the rules
table (:mod:`bridgebench.config.rules.table`) holds each rule's source; :func:`enum_errors` runs where every composed
config and every swept value is checked (``bridgebench.config.schema.check_sections``), so a misspelt enum value is an
error at once, never a prune.

Versions read (paths relative to each repository):

- megatron-core 0.19.2 (installed): ``transformer/transformer_config.py`` (field ``Literal`` types and
  ``__post_init__``), ``transformer/moe/moe_layer.py`` ``MoELayer.forward``, ``transformer/moe/token_dispatcher.py``
  ``MoEFlexTokenDispatcher`` (one group over the expert TP x EP ranks);
- Megatron-Bridge v0.3.1 (the NeMo 26.02 / 26.02.01 containers) and HEAD 067f987d (2026-08-22):
  ``scripts/performance/perf_plugins.py``, ``scripts/performance/utils/{utils,overrides,executors}.py``,
  ``src/megatron/bridge/training/flex_dispatcher_backend.py``; issue NVIDIA-NeMo/Megatron-Bridge#5992;
- DeepEP, hybrid-ep branch (what Megatron-Core's HybridEP backend imports, ``fused_a2a.py``):
  ``deep_ep/hybrid_ep_buffer.py`` ``HybridEPBuffer.__init__``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterable

from bridgebench.config.rules.point import Point, Violation
from bridgebench.model import placement as pl
from bridgebench.model.layout import LayoutError, auto_split

#: the upstream rules this module judges (their table entries, with sources: :data:`bridgebench.config.rules.RULES`)
RULE_IDS = (
    "hybridep_ep_domain",
    "hybridep_ranks_per_domain",
    "moe_tp_needs_sp",
    "ep_overlap_needs_vp",
    "fp8_output_proj_needs_mxfp8",
    "deepep_falls_back",
    "enum_value",
)

#: upstream's values of the enum settings bridgebench reads, by config key (``None`` is allowed for all but the
#: dispatcher type, backend and CUDA-graph implementation, as in megatron-core 0.19.2).
ENUMS: dict[str, tuple[str, ...]] = {
    "model.recompute_granularity": ("full", "selective"),
    "model.recompute_method": ("uniform", "block"),
    "model.recompute_modules": (
        "core_attn",
        "moe_act",
        "layernorm",
        "mla_up_proj",
        "mlp",
        "moe",
        "shared_experts",
        "gdn_norm_out",
    ),
    "model.moe_token_dispatcher_type": ("allgather", "alltoall", "flex"),
    "model.moe_flex_dispatcher_backend": ("deepep", "hybridep", "ncclep"),
    "model.cp_comm_type": ("p2p", "all_gather", "a2a", "a2a+p2p"),
    "model.cuda_graph_impl": ("none", "local", "transformer_engine", "full_iteration"),
}
#: keys whose value is a list of enum values
LIST_ENUMS = frozenset({"model.recompute_modules", "model.cp_comm_type"})


def did_you_mean(value: Any, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` (difflib, cutoff 0.6), else ``""``."""
    close = difflib.get_close_matches(str(value), list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def override_enum_errors(key: str, text: str) -> list[str]:
    """:func:`enum_errors` of a Hydra override's value text (a word, a quoted string or a ``[list]``, read as YAML)."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    return enum_errors(key, value)


def enum_errors(key: str, value: Any) -> list[str]:
    """Messages (rule ``enum_value``) for a value of an enum setting (:data:`ENUMS`) outside upstream's values;
    ``[]`` for keys that are no enum, ``None``, or a value in the set. Lists are judged item by item.
    Interpolations (``${...}``) and the sweep's ``auto`` are left to their own checks."""
    choices = ENUMS.get(key)
    if choices is None or value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) and key in LIST_ENUMS else [value]
    out = []
    for item in items:
        if isinstance(item, str) and (item.startswith("${") or item == "auto"):
            continue
        if item not in choices:
            out.append(
                f"enum_value: {key} = {item!r} is not one of megatron-core 0.19.2's values "
                f"({', '.join(choices)}){did_you_mean(item, choices)}"
            )
    return out


# ---------------------------------------------------------------------------------------------------- dispatchers
def nvl72(nvlink_domain: int | None, gpus_per_node: int) -> bool:
    """The system's NVLink domain spans nodes (GB200 / GB300 NVL72): what the launcher's ``gpu in ['gb200',
    'gb300']`` branch means (``configs/gpu``: domain 72 > 4 GPUs per node)."""
    return nvlink_domain is not None and nvlink_domain > gpus_per_node


def requested_backend(dispatcher_type: str | None, backend: str | None) -> str:
    """What the config asks for: ``alltoall``, ``allgather``, or the flex backend (``deepep``, ``hybridep``,
    ``ncclep``). Megatron-Core reads the backend only under the flex dispatcher type: ``alltoall`` with a backend
    set (every built container has one: megatron-core 0.19.2 defaults it to ``deepep``; Kimi K2's base recipe sets
    ``alltoall`` with ``deepep`` and never applies it) runs ``alltoall``. A backend without a dispatcher type is
    the flex dispatcher (Megatron-Bridge ``apply_flex_dispatcher_backend`` sets the type where the backend is
    supported); since stop 32 a composed config has the type (the base recipe's, ``DISPATCH_FIELDS``)."""
    if dispatcher_type == "flex":
        return str(backend or "deepep")  # megatron-core 0.19.2's default flex backend
    if dispatcher_type is None and backend:
        return str(backend)
    return str(dispatcher_type or "alltoall")


def deepep_falls_back(backend: str, gpu: str, compute_capability: float | None) -> bool:
    """DeepEP asked for on a GPU Megatron-Bridge's ``apply_flex_dispatcher_backend`` refuses it on (compute
    capability not 8.x / 9.x and not NVIDIA B200 / B300: GB200, GB300): it runs ``alltoall`` instead."""
    if backend != "deepep" or compute_capability is None:
        return False
    return int(float(compute_capability)) not in (8, 9) and str(gpu).lower() not in ("b200", "b300")


def effective_dispatcher(
    dispatcher_type: str | None, backend: str | None, gpu: str, compute_capability: float | None
) -> tuple[str | None, str | None, str]:
    """``(moe_token_dispatcher_type, moe_flex_dispatcher_backend, note)`` that actually run: DeepEP on GB200 /
    GB300 becomes ``alltoall`` (rule ``deepep_falls_back``, the note says so); otherwise as given."""
    want = requested_backend(dispatcher_type, backend)
    if deepep_falls_back(want, gpu, compute_capability):
        note = (
            f"deepep_falls_back: DeepEP was requested on {gpu}; Megatron-Bridge's apply_flex_dispatcher_backend "
            "falls back to alltoall there (NVIDIA-NeMo/Megatron-Bridge#5992), so it is priced as alltoall"
        )
        return "alltoall", None, note
    return dispatcher_type, backend, ""


def launcher_ranks_per_domain(ep: int, nvlink_domain: int, gpus_per_node: int) -> int:
    """``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` as Megatron-Bridge's launcher sets it: EP on NVL72 systems,
    ``min(EP, 8)`` on 8-GPU NVLink systems (v0.3.1 ``perf_plugins.py::_set_nvl_domain_size``; HEAD
    ``utils.py::apply_target_topology_environment``)."""
    return ep if nvl72(nvlink_domain, gpus_per_node) else min(ep, nvlink_domain)


# ---------------------------------------------------------------------------------------------------- point rules
@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One broken upstream rule: ``rule`` (an id of :data:`RULES`), ``message`` (its numbers) and ``fix`` (the
    override that makes the point valid, or None)."""

    rule: str
    message: str
    fix: str | None = None


def _ep_fix(ep: int, experts: int | None, limit: int) -> str:
    """The largest EP <= ``limit`` that divides the experts, as an override (or the alltoall dispatcher)."""
    cand = next((c for c in range(min(ep, limit), 0, -1) if experts is None or experts % c == 0), 1)
    return f"model.expert_model_parallel_size={cand} (or the alltoall dispatcher instead of HybridEP)"


def hybridep_findings(
    *,
    num_gpus: int,
    tp: int,
    cp: int,
    pp: int,
    ep: int,
    etp: int,
    experts: int | None,
    gpus_per_node: int,
    nvlink_domain: int | None,
    segment_policy: str,
    env_ranks_per_domain: Any,
) -> list[Finding]:
    """Rules ``hybridep_ep_domain`` and ``hybridep_ranks_per_domain`` for a point that runs HybridEP (see
    :data:`RULES`). ``env_ranks_per_domain``: the config's ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` (int), else
    the launcher's value is assumed."""
    if nvlink_domain is None or ep * etp <= 1:
        return []
    out = []
    big = nvl72(nvlink_domain, gpus_per_node)
    ep_fix = _ep_fix(ep, experts, nvlink_domain)  # the fix of both start-up assertions: an EP that fits the domain
    if big and ep > nvlink_domain:
        message = (
            f"HybridEP expert parallel size EP = {ep} exceeds the {nvlink_domain}-rank NVLink domain "
            f"(Megatron-Bridge's launcher asserts EP <= {nvlink_domain} on GB200/GB300)"
        )
        out.append(Finding(rule="hybridep_ep_domain", message=message, fix=ep_fix))
    ranks = env_ranks_per_domain
    if type(ranks) is not int or ranks < 1:
        ranks = launcher_ranks_per_domain(ep, nvlink_domain, gpus_per_node)
    group = etp * ep
    if group % ranks:
        message = (
            f"HybridEP group ETP x EP = {etp} x {ep} = {group} ranks is not a multiple of "
            f"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN = {ranks} (DeepEP HybridEPBuffer asserts it)"
        )
        out.append(Finding(rule="hybridep_ranks_per_domain", message=message, fix=ep_fix))
        return out
    try:
        domain = pl.domain_gpus(num_gpus, gpus_per_node, nvlink_domain, segment_policy)
        placed = pl.place(num_gpus, tp=tp, cp=cp, pp=pp, ep=ep, etp=etp, domain=domain).group("tp_ep")
    except pl.PlacementError:
        return out  # world_size / expert_grid say why
    bad = [s for s in placed.splits if any(m % ranks for m in s)]
    if bad:
        split = "/".join(str(m) for m in bad[0])
        out.append(
            Finding(
                rule="hybridep_ranks_per_domain",
                message=f"HybridEP takes every {ranks} consecutive ranks of its {group}-rank group as one NVLink "
                f"domain, but the scheduler places the job on {domain}-GPU domains and some groups split {split} "
                f"over them (Megatron-Core rank order tp-cp-ep-dp-pp)",
                fix="gpu.segment_policy=nvidia_launcher (sbatch --segment keeps each segment in one rack)"
                if big and segment_policy == "packed"
                else _ep_fix(min(ep, domain), experts, domain),
            )
        )
    return out


def moe_sp_finding(*, experts: int | None, tp: int, sequence_parallel: bool) -> Finding | None:
    """Rule ``moe_tp_needs_sp``: a MoE model (``experts`` set) with TP > 1 and no sequence parallelism."""
    if experts and tp > 1 and not sequence_parallel:
        return Finding(
            rule="moe_tp_needs_sp",
            message=f"a MoE model with TP = {tp} needs sequence parallelism (Megatron-Core's MoELayer raises in "
            "training without it)",
            fix="model.sequence_parallel=true",
        )
    return None


def ep_overlap_finding(*, overlap: bool, pp: int, vp: int | None) -> Finding | None:
    """Rule ``ep_overlap_needs_vp``: ``overlap_moe_expert_parallel_comm`` with PP > 1 needs the interleaved schedule
    (``vp``: the virtual pipeline size in effect, a layout's included; megatron-core 0.19.2
    ``transformer/transformer_config.py`` ``TransformerConfig.__post_init__``: "If enabling EP A2A overlap,
    virtual_pipeline_model_parallel_size must be specified when pipeline_model_parallel_size > 1")."""
    if overlap and pp > 1 and vp is None:
        return Finding(
            rule="ep_overlap_needs_vp",
            message=f"overlap_moe_expert_parallel_comm with PP = {pp} needs a virtual pipeline size (Megatron-Core "
            "refuses the EP all-to-all overlap without the interleaved schedule)",
            fix="comm_overlap.overlap_moe_expert_parallel_comm=false, or model.virtual_pipeline_model_parallel_size"
            "=<VP > 1> with a split that fits it",
        )
    return None


def fp8_output_proj_finding(*, fp8_output_proj: bool, precision: str) -> Finding | None:
    """Rule ``fp8_output_proj_needs_mxfp8``: ``model.fp8_output_proj`` outside the MXFP8 recipe (``precision``:
    bridgebench's precision name; megatron-core 0.19.2 ``transformer/transformer_config.py``
    ``TransformerConfig.__post_init__``: "fp8_output_proj must be used together with fp8 mode" and "fp8_output_proj
    requires fp8_recipe='mxfp8'")."""
    if fp8_output_proj and precision != "mxfp8":
        return Finding(
            rule="fp8_output_proj_needs_mxfp8",
            message=f"model.fp8_output_proj needs the MXFP8 recipe, this run is {precision} (Megatron-Core refuses "
            "the quantized output layer otherwise)",
            fix="model.fp8_output_proj=false",
        )
    return None


def without_refused_ep_overlap(cfg: Any) -> tuple[Any, bool]:
    """``(cfg, dropped)``: a time point (:class:`bridgebench.model.steptime.config.TimeConfig`) with its EP overlap
    turned off where :func:`ep_overlap_finding` says Megatron-Core refuses it (PP > 1 without VP), and whether it
    was: what a row that ran can have run (published rows printed without VP, an ablation row's stated overlap)."""
    if ep_overlap_finding(overlap=cfg.overlap_moe_expert_parallel_comm, pp=cfg.pp, vp=cfg.vp) is None:
        return cfg, False
    return cfg.with_dims(overlap_moe_expert_parallel_comm=False), True


def upstream_violations(p: Point, etp: int, found: list[Violation], vp: int | None = None) -> list[Violation]:
    """The upstream start-up assertions of a point (MoE + TP needs SP, the EP overlap needs VP with PP > 1 --
    ``vp`` the virtual pipeline size in effect, a layout's included --, the quantized output layer needs MXFP8,
    HybridEP's EP and NVLink-domain rules on the
    dispatcher that actually runs); and, in place in ``found``, the working split suggested as the fix of a
    ``layers_fit_pp_vp`` violation (:func:`layout_fix`)."""
    out = []
    sp = moe_sp_finding(experts=p.num_moe_experts, tp=p.tp, sequence_parallel=p.sequence_parallel)
    if sp is not None:
        out.append(Violation(sp.rule, sp.message, sp.fix))
    ov = ep_overlap_finding(overlap=p.overlap_moe_expert_parallel_comm, pp=p.pp, vp=vp)
    if ov is not None:
        out.append(Violation(ov.rule, ov.message, ov.fix))
    head = fp8_output_proj_finding(fp8_output_proj=p.fp8_output_proj, precision=p.precision)
    if head is not None:
        out.append(Violation(head.rule, head.message, head.fix))
    dtype, backend, _ = effective_dispatcher(
        p.moe_token_dispatcher_type, p.moe_flex_dispatcher_backend, p.gpu, p.compute_capability
    )
    if p.num_moe_experts and requested_backend(dtype, backend) == "hybridep":
        for f in hybridep_findings(
            num_gpus=p.num_gpus, tp=p.tp, cp=p.cp, pp=p.pp, ep=p.ep, etp=etp, experts=p.num_moe_experts,
            gpus_per_node=p.gpus_per_node, nvlink_domain=p.nvlink_domain, segment_policy=p.segment_policy,
            env_ranks_per_domain=p.env_hybrid_ep_ranks_per_nvlink_domain,
        ):  # fmt: skip
            out.append(Violation(f.rule, f.message, f.fix))
    for i, v in enumerate(found):
        if v.rule == "layers_fit_pp_vp" and v.fix is None:
            found[i] = Violation(v.rule, v.message, layout_fix(p))
    return out


def layout_fix(p: Point) -> str:
    """The override that gives a split Megatron-Core accepts: ``pipeline_model_parallel_layout=auto`` and the
    layout it stands for (:func:`bridgebench.model.layout.auto_split`: the even split, embedding and loss counted
    as layers, or Megatron-Bridge's balanced layout string)."""
    try:
        split = auto_split(p.num_layers, p.pp, p.vp, p.mtp_num_layers or 0)
    except (LayoutError, ValueError, TypeError):
        return "model.pipeline_model_parallel_layout=auto"
    first, last = split.first_stage_layers, split.last_stage_layers
    if split.layout:
        what = f"the layout {split.layout!r}"
    elif split.account_for_embedding or split.account_for_loss:
        what = "embedding and loss counted as layers (account_for_embedding/loss_in_pipeline_split)"
    else:
        what = f"first/last stages of {first}/{last} layers" if first or last else "an even split"
    return f"model.pipeline_model_parallel_layout=auto (gives {what})"
