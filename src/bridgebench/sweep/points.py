"""Stages 1 and 2 of a sweep: every candidate point as a row (:func:`enumerate_points`: the cartesian product of a
space's field axes over its bases, or explicit ``(base, delta)`` pairs; ``auto`` keys derived per point; a
``point_id`` per effective configuration) and the fast validity rules (:func:`check_rules`:
:func:`bridgebench.config.rules.check` on each point; points with the same effective values kept once)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from typing import Any, Callable, Iterable, Sequence

from bridgebench.config import rules
from bridgebench.model.layout import LayoutError, PipelineSplit, auto_split
from bridgebench.model.parallel import ParallelDims
from bridgebench.model.spec import ModelSpec
from bridgebench.sweep.bases import Base, arch_spec, effective
from bridgebench.sweep.keys import AUTO, KEYS
from bridgebench.sweep.space import Space


def rule_point(v: dict[str, Any], spec: ModelSpec, env: dict[str, Any] | None = None) -> rules.Point:
    return rules.Point(
        **(env or {}),
        dims=ParallelDims.from_row(v),
        num_layers=spec.num_layers,
        num_attention_heads=spec.num_attention_heads,
        seq_length=v["seq_length"],
        gpus_per_node=v["gpus_per_node"],
        sequence_parallel=bool(v["sequence_parallel"]),
        mtp_num_layers=spec.mtp_num_layers,
        num_query_groups=spec.num_query_groups,
        num_moe_experts=spec.num_moe_experts,
        pipeline_model_parallel_layout=v["layout"],
        num_layers_in_first_pipeline_stage=v["first_stage_layers"],
        num_layers_in_last_pipeline_stage=v["last_stage_layers"],
        account_for_embedding_in_pipeline_split=bool(v["account_embedding"]),
        account_for_loss_in_pipeline_split=bool(v["account_loss"]),
        optimizer=v["optimizer"],
        use_distributed_optimizer=bool(v["use_distributed_optimizer"]),
        ddp_use_distributed_optimizer=bool(v["ddp_use_distributed_optimizer"]),
        overlap_param_gather=bool(v["overlap_param_gather"]),
        fp8_param_gather=bool(v["fp8_param_gather"]),
        reuse_grad_buf_for_mxfp8_param_ag=bool(v["reuse_grad_buf"]),
        precision=v["precision"],
        gpu=str(v["gpu"]),
        compute_capability=v["compute_capability"],
        min_compute_capability=v["min_compute_capability"],
        nvlink_domain=v["nvlink_domain"],
        segment_policy=str(v["segment_policy"] or "node"),
        moe_token_dispatcher_type=v["moe_token_dispatcher_type"],
        moe_flex_dispatcher_backend=v["moe_flex_dispatcher_backend"],
        overlap_moe_expert_parallel_comm=bool(v.get("overlap_moe_expert_parallel_comm") or False),
        fp8_output_proj=bool(v.get("fp8_output_proj") or False),
    )


def _point_id(base: Base, delta: dict[str, Any], v: dict[str, Any]) -> str:
    """Hash of the base config's hash and the point's swept values, with settings that cannot matter made equal:
    ETP unset = TP (Megatron-Core ``TransformerConfig.__post_init__``), recompute modules only with selective
    recompute, recompute method / layers only with full recompute."""
    canon = {k: (v["etp_effective"] if k == KEYS["etp"] else val) for k, val in delta.items()}
    if v["recompute_granularity"] != "selective":
        canon.pop(KEYS["recompute_modules"], None)
    if v["recompute_granularity"] != "full":
        canon.pop(KEYS["recompute_method"], None)
        canon.pop(KEYS["recompute_num_layers"], None)
    text = base.config_hash + json.dumps(canon, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _row(base: Base, delta: dict[str, Any], v: dict[str, Any]) -> dict[str, Any]:
    tp, pp, cp = v["tp"], v["pp"], v["cp"]
    dims = ParallelDims.from_row(v)
    bad = [m for rule, m in dims.size_problems() if m.split(" ", 1)[0] in ("num_gpus", "tp", "pp", "cp")]
    dp = dims.dp if not bad and dims.world_size_problem() is None else None
    mods = v["recompute_modules"]
    return {
        "base": base.index,
        "delta": json.dumps(delta, default=list),
        "base_choices": json.dumps(base.choices),
        "model": base.spec.name,
        "gpu": v["gpu"],
        "precision": v["precision"],
        "optimizer": v["optimizer"],
        "num_gpus": v["num_gpus"],
        "tp": tp,
        "pp": pp,
        "vp": v["vp"],
        "cp": cp,
        "ep": v["ep"],
        "etp": v["etp_effective"],
        "dp": dp,
        "mbs": v["mbs"],
        "gbs": v["gbs"],
        "sequence_parallel": bool(v["sequence_parallel"]),
        "layout": v["layout"],
        "account_embedding": bool(v["account_embedding"]),
        "account_loss": bool(v["account_loss"]),
        "recompute_granularity": v["recompute_granularity"],
        "recompute_modules": ",".join(mods) if mods and v["recompute_granularity"] == "selective" else None,
        "job_type": v["job_type"],
        "job_layers": v["job_layers"],
        "job_experts": v["job_experts"],
        "release": v["release"],
    }


def candidates(space: Space, bases: Sequence[Base]) -> tuple[int, Iterable[tuple[Base, dict[str, Any]]]]:
    """``(count, (base, delta) pairs)``: every base x the cartesian product of the space's field axes (``delta`` = the
    swept field values of one point). A space without field axes gives one point per base. A space of listed points
    (``points:``) gives exactly those, each over the base of its group values."""
    if space.points is not None:
        by_choice = {tuple(sorted(b.choices.items())): b for b in bases}
        listed = [
            (by_choice[tuple(sorted((k, v) for k, v in p.items() if k in by_group))], {
                k: v for k, v in p.items() if k not in by_group
            })
            for by_group in [{a.key for a in space.axes if a.group}]
            for p in space.points
        ]  # fmt: skip
        return len(listed), iter(listed)
    field_axes = [a for a in space.axes if not a.group]
    combos = list(itertools.product(*(a.values for a in field_axes))) if field_axes else [()]
    pairs = ((base, {a.key: v for a, v in zip(field_axes, combo)}) for base in bases for combo in combos)
    return len(bases) * len(combos), pairs


def _derive(base: Base, delta: dict[str, Any], v: dict[str, Any], spec: ModelSpec) -> tuple[dict, str | None, str]:
    """Resolve the ``auto`` keys of a point in place (``v``) and in its delta: ``sequence_parallel`` = TP > 1;
    ``pipeline_model_parallel_layout`` = :func:`bridgebench.model.layout.auto_split` of the base's own split (the
    recipe's layout, the point's uneven stages or ``account_for_*`` when they fit this PP x VP), an even split, the
    embedding and loss counted as layers, or a balanced layout string. Returns the new delta and an error (rule,
    message)."""
    if v["sequence_parallel"] == AUTO:
        sp = isinstance(v["tp"], int) and v["tp"] > 1
        delta = {**delta, KEYS["sequence_parallel"]: sp}
        v["sequence_parallel"] = sp
    if v["layout"] != AUTO:
        return delta, None, ""
    flat = base.flat
    own_layout = flat.get(KEYS["layout"])
    try:
        own = PipelineSplit(
            layout=None if own_layout == AUTO else own_layout,
            first_stage_layers=v["first_stage_layers"],
            last_stage_layers=v["last_stage_layers"],
            account_for_embedding=bool(v["account_embedding"]),
            account_for_loss=bool(v["account_loss"]),
        )
        split = auto_split(spec.num_layers, v["pp"], v["vp"], spec.mtp_layers, own)
    except (LayoutError, TypeError) as err:
        delta = {**delta, KEYS["layout"]: None}
        v["layout"] = None
        return delta, "positive_int", str(err)
    names = ("layout", "first_stage_layers", "last_stage_layers", "account_embedding", "account_loss")
    for name, value in zip(names, dataclasses.astuple(split)):
        if name == "layout" or value != flat.get(KEYS[name]):
            delta = {**delta, KEYS[name]: value}
        v[name] = value
    return delta, None, ""


def enumerate_points(
    space: Space | None,
    bases: Sequence[Base],
    progress: Callable[[int, int], None] | None = None,
    pairs: Iterable[tuple[Base, dict[str, Any]]] | None = None,
    total: int | None = None,
) -> list[dict[str, Any]]:
    """Stage 1: every point as a row -- the space's candidates (:func:`candidates`) or the given ``(base, delta)``
    pairs -- with its ``auto`` keys derived (:func:`_derive`) and its ``point_id``.

    Row keys: ``point_id``, ``base``, ``delta`` (JSON of the point's field values over its base), the effective
    sizes, ``status`` (``enumerated``, or ``invalid`` when the swept architecture breaks a model rule or the layout
    cannot be derived), ``rule`` and ``reason``.
    """
    if pairs is None:
        total, pairs = candidates(space, bases)
    out = []
    arch_cache: dict = {}
    done = 0
    for base, delta in pairs:
        spec = arch_spec(base, delta, arch_cache)
        v = effective(base, delta)
        status, rule, reason = "enumerated", None, ""
        if isinstance(spec, Exception):
            status, rule, reason = "invalid", "model_spec", str(spec)
            spec = base.spec
        delta, bad, why = _derive(base, delta, v, spec)
        if bad and status == "enumerated":
            status, rule, reason = "invalid", bad, why
        row = _row(base, delta, v)
        row["point_id"] = _point_id(base, delta, v)
        row.update(status=status, rule=rule, reason=reason)
        out.append(row)
        done += 1
        if progress and (done % 512 == 0 or done == total):
            progress(done, total or done)
    return out


def check_rules(
    rows: list[dict[str, Any]], bases: Sequence[Base], progress: Callable[[int, int], None] | None = None
) -> list[dict[str, Any]]:
    """Stage 2 (in place): :func:`bridgebench.config.rules.check` on every ``enumerated`` row (status ``invalid``,
    column ``rule`` = the first broken rule's id, ``rules`` = every broken rule's id, ``reason`` = every broken
    rule's message with its fix where one is known), then points with the
    same effective values (``point_id``) kept once (``duplicate``, ``reason`` = the point it duplicates); the rest
    become ``valid``."""
    seen: dict[str, str] = {}
    cache: dict = {}
    todo = [r for r in rows if r["status"] == "enumerated"]
    for i, row in enumerate(todo, 1):
        base = bases[row["base"]]
        delta = json.loads(row["delta"])
        spec = arch_spec(base, delta, cache)
        v = effective(base, delta)
        found = rules.check(rule_point(v, spec, base.rule_env(delta)))
        if found:
            row.update(
                status="invalid",
                rule=found[0].rule,
                rules=",".join(dict.fromkeys(f.rule for f in found)),
                reason="; ".join(str(f) for f in found),
            )
        elif row["point_id"] in seen:
            row.update(status="duplicate", reason=f"same effective values as point {seen[row['point_id']]}")
        else:
            seen[row["point_id"]] = row["point_id"]
            row["status"] = "valid"
        if progress and (i % 512 == 0 or i == len(todo)):
            progress(i, len(todo))
    return rows
