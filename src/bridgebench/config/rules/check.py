"""The rules' entry: :func:`check` (all rules broken by one point, pure Python, fast path for plain ints),
:func:`validate` (raise them) and :func:`check_config` (a composed config). Each rule's id, source and summary:
:data:`RULES` (:mod:`bridgebench.config.rules.table`)."""

from __future__ import annotations

from typing import Any

from bridgebench.config.rules.pipeline import layout_violations, split_violations
from bridgebench.config.rules.point import Point, RuleError, Violation
from bridgebench.config.rules.sizes import size_violations
from bridgebench.config.rules.system import system_violations
from bridgebench.config.rules.upstream import upstream_violations
from bridgebench.model.optimizer import family as optimizer_family


def check(p: Point) -> list[Violation]:
    """All rules broken by ``p`` (empty list = valid). Pure Python; see the module docstring for each rule's source."""
    d = p.dims
    for v in (
        d.num_gpus,
        p.num_layers,
        p.num_attention_heads,
        p.seq_length,
        d.gbs,
        d.mbs,
        p.gpus_per_node,
        d.tp,
        d.pp,
        d.cp,
        d.ep,
    ):
        if type(v) is not int or v < 1:
            return _slow_path(p)
    for opt in (
        d.vp,
        d.etp,
        p.num_query_groups,
        p.num_moe_experts,
        p.num_layers_in_first_pipeline_stage,
        p.num_layers_in_last_pipeline_stage,
    ):
        if opt is not None and (type(opt) is not int or opt < 1):
            return _slow_path(p)
    mtp = p.mtp_num_layers
    if mtp is None:
        mtp = 0
    elif type(mtp) is not int or mtp < 0:
        return _slow_path(p)

    layout = p.pipeline_model_parallel_layout
    if layout is not None and type(layout) is not str:
        return _slow_path(p)
    out, dp = _grid_violations(p)
    vp, found = _pipeline_violations(p, mtp)
    out.extend(found)
    out.extend(_batch_violations(p, dp, vp))
    out.extend(_optimizer_violations(p))
    out.extend(system_violations(p))
    out.extend(upstream_violations(p, p.tp if p.etp is None else p.etp, out, vp))
    return out


def _grid_violations(p: Point) -> tuple[list[Violation], int]:
    """World size, nodes, the expert grid, experts over EP, heads and query groups over TP, sequence parallelism and
    the sequence over CP / TP; with the data-parallel size (0 when TP x PP x CP does not divide the world)."""
    out: list[Violation] = []
    d = p.dims
    n = d.num_gpus
    tp, cp, ep = d.tp, d.cp, d.ep

    # world size = TP x PP x CP x DP
    dp = 0
    world = d.world_size_problem()
    if world:
        out.append(Violation("world_size", world))
    else:
        dp = d.dp

    gpn = p.gpus_per_node
    if n % gpn and (n > gpn or gpn % n):
        out.append(
            Violation(
                "gpus_per_node",
                f"num_gpus {n} is not a multiple of gpus_per_node {gpn} (nor a "
                f"divisor of it, for a single partial node)",
            )
        )

    # expert grid: ETP x EP x PP x expert-DP = world size
    grid = d.expert_grid_problem()
    if grid:
        out.append(Violation("expert_grid", grid))
    experts = p.num_moe_experts
    if experts is None:
        if ep > 1:
            out.append(Violation("ep_needs_moe", f"EP = {ep} needs a MoE model (num_moe_experts is None)"))
    elif experts % ep:
        out.append(Violation("experts_divisible", f"num_moe_experts {experts} is not divisible by EP = {ep}"))

    heads = p.num_attention_heads
    if heads % tp:
        out.append(Violation("heads_divisible_tp", f"num_attention_heads {heads} is not divisible by TP = {tp}"))
    groups = p.num_query_groups or heads
    if groups % tp and tp % groups:
        out.append(
            Violation(
                "query_groups_divisible_tp",
                f"num_query_groups {groups} is neither a multiple nor a divisor of TP = {tp}",
            )
        )
    if p.sequence_parallel and tp == 1:
        out.append(Violation("sequence_parallel_needs_tp", "sequence_parallel needs TP > 1, TP = 1"))

    seq = p.seq_length
    if cp > 1 and seq % (2 * cp):
        out.append(Violation("seq_divisible_cp", f"seq_length {seq} is not divisible by 2 x CP = 2 x {cp} = {2 * cp}"))
    if p.sequence_parallel and tp > 1 and seq % (tp * cp):
        out.append(
            Violation(
                "seq_divisible_tp_sp",
                f"seq_length {seq} is not divisible by TP x CP = {tp} x {cp} "
                f"= {tp * cp} (sequence parallelism splits each CP rank's "
                f"tokens over TP)",
            )
        )
    return out, dp


def _pipeline_violations(p: Point, mtp: int) -> tuple[int | None, list[Violation]]:
    """Layers over PP x VP (layout or split, :mod:`bridgebench.config.rules.pipeline`) and ``vp_needs_pp``; with the
    effective VP (a layout's stage count sets it when VP is unset)."""
    out: list[Violation] = []
    pp = p.pp
    # layers over PP x VP
    vp = p.vp
    layout = p.pipeline_model_parallel_layout
    first, last = p.num_layers_in_first_pipeline_stage, p.num_layers_in_last_pipeline_stage
    account = p.account_for_embedding_in_pipeline_split or p.account_for_loss_in_pipeline_split
    if (first is not None or last is not None) and account:
        out.append(
            Violation(
                "pipeline_split_conflict",
                "num_layers_in_first/last_pipeline_stage cannot be set "
                "together with account_for_embedding/loss_in_pipeline_split",
            )
        )
    if layout is not None:
        if first is not None or last is not None or account:
            out.append(
                Violation(
                    "pipeline_split_conflict",
                    "pipeline_model_parallel_layout cannot be set together "
                    "with num_layers_in_first/last_pipeline_stage or "
                    "account_for_embedding/loss_in_pipeline_split",
                )
            )
        vp, found = layout_violations(layout, pp, vp, p.num_layers, mtp)
        out.extend(found)
    else:
        out.extend(split_violations(p, pp, vp, p.num_layers))
    if vp is not None and pp == 1:
        out.append(Violation("vp_needs_pp", f"VP = {vp} (interleaved schedule) needs PP > 1, PP = 1"))
    return vp, out


def _batch_violations(p: Point, dp: int, vp: int | None) -> list[Violation]:
    """``gbs_divisible`` and ``microbatches_interleaved`` (skipped when the world size rule already failed):
    :meth:`bridgebench.model.parallel.ParallelDims.batch_problem` with the VP in effect."""
    if not dp:
        return []
    found = p.dims.batch_problem(vp)
    return [Violation(*found)] if found else []


def _optimizer_violations(p: Point) -> list[Violation]:
    """Muon's distributed-optimizer, param-gather and MXFP8 rules, and FP8 param gathering's own."""
    out: list[Violation] = []
    # optimizer and precision
    mxfp8 = "mxfp8" in p.precision
    if optimizer_family(p.optimizer) == "muon":
        on = [
            name
            for name, flag in (
                ("optimizer.use_distributed_optimizer", p.use_distributed_optimizer),
                ("ddp.use_distributed_optimizer", p.ddp_use_distributed_optimizer),
            )
            if flag
        ]
        if on:
            out.append(
                Violation(
                    "muon_dist_optimizer",
                    f"optimizer {p.optimizer!r} needs "
                    f"optimizer.use_distributed_optimizer = false and "
                    f"ddp.use_distributed_optimizer = false, but "
                    f"{' and '.join(on)} = true",
                )
            )
        if p.overlap_param_gather:
            out.append(
                Violation(
                    "muon_overlap_param_gather", f"optimizer {p.optimizer!r} needs ddp.overlap_param_gather = false"
                )
            )
        if mxfp8 and p.fp8_param_gather:
            out.append(
                Violation(
                    "muon_fp8_param_gather",
                    f"optimizer {p.optimizer!r} under {p.precision} needs mixed_precision.fp8_param_gather = false",
                )
            )
        if mxfp8 and p.reuse_grad_buf_for_mxfp8_param_ag:
            out.append(
                Violation(
                    "muon_reuse_grad_buf",
                    f"optimizer {p.optimizer!r} under {p.precision} needs "
                    f"mixed_precision.reuse_grad_buf_for_mxfp8_param_ag = false",
                )
            )
    if p.reuse_grad_buf_for_mxfp8_param_ag and not p.fp8_param_gather:
        out.append(
            Violation(
                "reuse_grad_buf_needs_fp8_param_gather",
                "reuse_grad_buf_for_mxfp8_param_ag = true needs fp8_param_gather = true",
            )
        )
    if p.fp8_param_gather:
        if "fp8" not in p.precision:
            out.append(
                Violation(
                    "fp8_param_gather_needs_fp8",
                    f"fp8_param_gather = true needs an FP8 precision, precision is {p.precision}",
                )
            )
        elif mxfp8 and not p.reuse_grad_buf_for_mxfp8_param_ag:
            out.append(
                Violation(
                    "mxfp8_param_gather_needs_reuse_grad_buf",
                    "under mxfp8, fp8_param_gather = true needs reuse_grad_buf_for_mxfp8_param_ag = true",
                )
            )
    return out


def _slow_path(p: Point) -> list[Violation]:
    bad, fixed = size_violations(p)
    return bad if fixed is None else check(fixed)


def validate(p: Point) -> None:
    """Raise :class:`RuleError` listing every broken rule, or return None."""
    found = check(p)
    if found:
        raise RuleError(found)


def check_config(cfg: Any) -> list[Violation]:
    """:func:`check` of a composed config (``Point.from_config``)."""
    return check(Point.from_config(cfg))
