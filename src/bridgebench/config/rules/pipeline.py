"""Pipeline rules: a ``pipeline_model_parallel_layout`` string checked as Megatron-Core's
``PipelineParallelLayerLayout`` and ``TransformerConfig`` check it (``layout_syntax``, ``layout_stages``,
``layout_layers``), and the layer split without a layout (``layers_fit_pp_vp``: uneven first / last stage,
``account_for_embedding/loss_in_pipeline_split``, even split), megatron-core 0.19.2. Sources per rule: :data:`RULES`
(:mod:`bridgebench.config.rules.table`)."""

from __future__ import annotations

from functools import lru_cache

from bridgebench.config.rules.point import Point, Violation
from bridgebench.model.layout import parse_layout_stages


@lru_cache(maxsize=4096)
def layout_violations(
    layout: str, pp: int, vp: int | None, num_layers: int, mtp: int
) -> tuple[int | None, tuple[Violation, ...]]:
    """(effective VP, violations) of a layout string, as Megatron-Core's layout class and TransformerConfig."""
    stages, error = parse_layout_stages(layout)
    if stages is None:
        return vp, (Violation("layout_syntax", error),)
    n = len(stages)
    if n % pp:
        return vp, (
            Violation(
                "layout_stages",
                f"layout {layout!r} has {n} stages, which is not a multiple of PP = {pp} (it must have PP x VP stages)",
            ),
        )
    detected = n // pp
    out = []
    if vp is not None and vp != detected:
        out.append(
            Violation(
                "layout_stages",
                f"layout {layout!r} has {n} stages = PP x {detected} but VP = {vp}: "
                f"it must have PP x VP = {pp} x {vp} = {pp * vp} stages",
            )
        )
    eff_vp = vp if vp is not None else (detected if detected > 1 else None)
    flat = "".join(stages)

    def bad(message: str) -> None:
        out.append(Violation("layout_layers", f"layout {layout!r}: {message}"))

    if not flat or flat[0] != "E":
        bad(f"the first layer must be the embedding E, got {flat[:1] or 'nothing'!r}")
    if not flat or flat[-1] != "L":
        bad(f"the last layer must be the loss L, got {flat[-1:] or 'nothing'!r}")
    if flat.count("E") != 1:
        bad(f"the embedding E must appear exactly once, found {flat.count('E')}")
    if flat.count("L") != 1:
        bad(f"the loss L must appear exactly once, found {flat.count('L')}")
    if flat.count("t") != num_layers:
        bad(f"it has {flat.count('t')} decoder layers t, num_layers is {num_layers}")
    n_m = flat.count("m")
    if n_m != mtp:
        bad(f"it has {n_m} MTP layers m, mtp_num_layers is {mtp}")
    if n_m:
        if "t" in flat[flat.index("m") :]:
            bad("decoder layers t must all come before the MTP layers m")
        # layout[pp_rank][vpp_rank] = stages[vpp_rank * PP + pp_rank]
        for i, stage in enumerate(stages):
            if "m" in stage:
                if i // pp < detected - 1:
                    bad(
                        f"MTP layers must be in the last virtual stage of their pipeline rank, found in stage {i} "
                        f"(pipeline rank {i % pp}, virtual stage {i // pp} of {detected})"
                    )
                elif stage.count("m") != mtp:
                    bad(f"all {mtp} MTP layers must be in one stage, stage {i} has {stage.count('m')}")
    return eff_vp, tuple(out)


def split_violations(p: Point, pp: int, vp: int | None, num_layers: int) -> list[Violation]:
    """Layer split without a layout: Megatron-Core's uneven (:func:`_uneven_split_violations`) / account_for / even
    branches (rule ``layers_fit_pp_vp``)."""
    first = p.num_layers_in_first_pipeline_stage
    last = p.num_layers_in_last_pipeline_stage
    out: list[Violation] = []
    if first is not None or last is not None:
        return _uneven_split_violations(first, last, pp, vp, num_layers)
    extra = p.account_for_embedding_in_pipeline_split + p.account_for_loss_in_pipeline_split
    if extra:
        total = num_layers + extra
        if total % pp:
            return [
                Violation(
                    "layers_fit_pp_vp",
                    f"num_layers {num_layers} + {extra} (embedding/loss counted as "
                    f"layers) = {total} is not divisible by PP = {pp}",
                )
            ]
        if vp is not None and (total // pp) % vp:
            return [
                Violation(
                    "layers_fit_pp_vp",
                    f"layers per pipeline stage {total // pp} ((num_layers "
                    f"{num_layers} + {extra}) / PP {pp}) is not divisible by VP = "
                    f"{vp}",
                )
            ]
        return out
    if num_layers % pp:
        return [
            Violation(
                "layers_fit_pp_vp",
                f"num_layers {num_layers} is not divisible by PP = {pp} (even split; "
                f"an uneven one needs pipeline_model_parallel_layout, "
                f"num_layers_in_first/last_pipeline_stage or account_for_*)",
            )
        ]
    if vp is not None and pp > 1 and (num_layers // pp) % vp:
        return [
            Violation(
                "layers_fit_pp_vp",
                f"layers per pipeline stage {num_layers // pp} (num_layers "
                f"{num_layers} / PP {pp}) is not divisible by VP = {vp}",
            )
        ]
    return out


def _uneven_split_violations(
    first: int | None, last: int | None, pp: int, vp: int | None, num_layers: int
) -> list[Violation]:
    """``num_layers_in_first/last_pipeline_stage`` set: each divisible by VP, the middle layers over the middle
    stages (megatron-core 0.19.2 ``TransformerConfig`` and ``get_num_layers_to_build``)."""
    out: list[Violation] = []
    if vp is not None:
        for name, value in (("first", first), ("last", last)):
            if value is not None and value % vp:
                out.append(
                    Violation(
                        "layers_fit_pp_vp",
                        f"num_layers_in_{name}_pipeline_stage {value} is not divisible by VP = {vp}",
                    )
                )
    stages = pp - (first is not None) - (last is not None)
    middle = num_layers - (first or 0) - (last or 0)
    if stages < 0:
        return out + [
            Violation(
                "layers_fit_pp_vp",
                f"num_layers_in_first_pipeline_stage and "
                f"num_layers_in_last_pipeline_stage are both set but PP = "
                f"{pp} has a single stage",
            )
        ]
    if middle < 0:
        return out + [
            Violation(
                "layers_fit_pp_vp",
                f"num_layers_in_first/last_pipeline_stage ({first} + {last}) exceed num_layers {num_layers}",
            )
        ]
    if bool(middle) != bool(stages):
        return out + [
            Violation(
                "layers_fit_pp_vp",
                f"{middle} layers are left for {stages} middle pipeline "
                f"stages (num_layers {num_layers}, first {first}, last "
                f"{last}, PP = {pp})",
            )
        ]
    if stages:
        if middle % stages:
            out.append(
                Violation(
                    "layers_fit_pp_vp",
                    f"{middle} middle layers are not divisible by the {stages} "
                    f"middle pipeline stages (num_layers {num_layers}, first "
                    f"{first}, last {last}, PP = {pp})",
                )
            )
        elif vp is not None and (middle // stages) % vp:
            out.append(
                Violation(
                    "layers_fit_pp_vp",
                    f"layers per middle pipeline stage {middle // stages} is not divisible by VP = {vp}",
                )
            )
    return out
