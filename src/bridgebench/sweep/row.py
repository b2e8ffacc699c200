"""One sweep point as a typed row, declared once: :class:`SweepRow` (keyword-only; units in the column names as
MaxText's ``benchmarks/`` schema has them: ``_gb`` = 1e9 bytes, ``_s`` seconds, ``_pct`` percent, ``tflops_per_gpu``
TFLOP/s per GPU, ``tokens_per_s_per_gpu``). The pipeline's stages fill plain records (dicts, one per point, fast to
update in place); :meth:`SweepRow.from_record` / :meth:`SweepRow.to_record` turn a record into the typed row and back,
and every ``points.parquet`` / ``stages/*.parquet`` is written and read through them (:func:`write_rows` /
:func:`read_rows`), so a column the schema does not know is refused by name and a parquet round trip gives back the
types (ints stay ints, missing values ``None``).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from bridgebench.errors import BridgebenchError
from bridgebench.model.parallel import DIM_FIELDS, ParallelDims


class SweepRowError(BridgebenchError):
    """A record that does not fit :class:`SweepRow` (an unknown column, a missing one); the message names it."""


@dataclass(kw_only=True)
class SweepRow:
    """One sweep point: what it is, what the stages decided, and what the models predict.

    Identity (stage 1): ``point_id`` (hash of the base config and the effective swept values), ``base`` (index of
    its base config), ``delta`` (its swept fields, JSON), ``base_choices`` (the base's config-group choices, JSON),
    ``model`` / ``gpu`` / ``precision`` / ``optimizer`` / ``release`` names, ``dims`` (the parallel sizes and batch,
    :class:`~bridgebench.model.parallel.ParallelDims`; the columns ``num_gpus tp pp vp cp ep etp mbs gbs`` and the
    derived ``dp``, None when TP x PP x CP does not divide the world), ``etp`` is the ETP in effect; the pipeline split
    (``layout``, ``account_embedding``, ``account_loss``), recompute, the optimizer-step job's subset (``job_*``).

    Verdict: ``status`` (``enumerated invalid duplicate valid over_memory fits ranked indistinct``; the launch layer:
    ``planned plan_failed submitted skipped``), ``rule`` (the rule id that pruned it), ``rules`` (every
    rule id it breaks, comma-separated) and ``reason``.

    Memory (stage 3, GB = 1e9 bytes, busiest GPU): ``mem_<term>_gb``, ``mem_stage`` (its pipeline rank),
    ``hbm_gb`` / ``hbm_usable_gb`` (capacity, and less the lowest measured fragmentation), ``tight``,
    ``expandable_segments``. Time (stage 4): ``step_time_s``, ``terms_s`` (seconds per term of the time model: the
    ``t_<term>_s`` columns; None where a stored sweep's other points have the term and this one has no time),
    ``tflops_per_gpu``, ``tokens_per_s_per_gpu``, ``band_pct`` (the ~68 % +- band, percent; ``band_50_pct`` /
    ``band_90_pct`` the 50 / 90 % ones, ``band_source`` what it is for), ``time_release``,
    ``efficiency`` / ``efficiency_source``, ``ep_scale_out``, the placement on NVLink domains (``domain_gpus``,
    ``segment_nodes``, ``ep_domains``, ``ep_split``, ``ep_cross_copies``, ``groups_crossing``:
    :func:`bridgebench.sweep.scoring.placement_columns`), the knobs as they run (``dispatcher`` ... ``knobs_source``:
    :func:`bridgebench.config.time_knobs.shown_knobs`), ``score`` (what the ranking sorts);
    with a cluster's own calibration, ``cluster_calibration`` and the published model's ``step_time_model_s`` /
    ``band_model_pct`` before the refit.
    Ranking: ``rank``, ``tie``, ``twins``, ``collapsed_into``, ``ep_span``, ``ep_leaves_nvlink``, ``published``.
    Launch: ``config_hash``, ``plan_dir``, ``run_ids``. ``predict``: ``fits``, ``pruned_by``, ``knobs`` (the settings
    users do not type, as they run), ``placement`` (the groups on the NVLink domains).
    """

    point_id: str | None = None
    base: int
    delta: str
    base_choices: str
    model: str
    gpu: str
    precision: str
    optimizer: str
    release: str | None = None
    dims: ParallelDims
    sequence_parallel: bool = False
    layout: str | None = None
    account_embedding: bool = False
    account_loss: bool = False
    recompute_granularity: str | None = None
    recompute_modules: str | None = None
    job_type: str | None = None
    job_layers: int | None = None
    job_experts: int | None = None
    status: str = "enumerated"
    rule: str | None = None
    rules: str | None = None
    reason: str | None = None
    hbm_gb: float | None = None
    hbm_usable_gb: float | None = None
    expandable_segments: bool | None = None
    mem_weights_gb: float | None = None
    mem_grads_gb: float | None = None
    mem_optimizer_gb: float | None = None
    mem_activations_gb: float | None = None
    mem_logits_gb: float | None = None
    mem_other_gb: float | None = None
    mem_total_gb: float | None = None
    mem_stage: int | None = None
    tight: bool | None = None
    step_time_s: float | None = None
    terms_s: dict[str, float | None] = field(default_factory=dict)
    tflops_per_gpu: float | None = None
    tokens_per_s_per_gpu: float | None = None
    band_pct: float | None = None
    band_50_pct: float | None = None
    band_90_pct: float | None = None
    band_source: str | None = None
    time_release: str | None = None
    efficiency: float | None = None
    efficiency_source: str | None = None
    ep_scale_out: bool | None = None
    domain_gpus: int | None = None
    segment_nodes: int | None = None
    ep_domains: int | None = None
    ep_split: str | None = None
    ep_cross_copies: float | None = None
    groups_crossing: str | None = None
    dispatcher: str | None = None
    dispatcher_note: str | None = None
    ep_overlap: bool | None = None
    shared_expert_overlap: bool | None = None
    tp_comm_overlap: bool | None = None
    recompute: str | None = None
    expert_capacity: str | None = None
    cuda_graph_impl: str | None = None
    cuda_graph_scope: str | None = None
    knobs_source: str | None = None
    score: float | None = None
    step_time_model_s: float | None = None
    band_model_pct: float | None = None
    cluster_calibration: str | None = None
    rank: int | None = None
    tie: bool | None = None
    twins: int | None = None
    collapsed_into: str | None = None
    ep_span: int | None = None
    ep_leaves_nvlink: bool | None = None
    published: bool | None = None
    config_hash: str | None = None
    plan_dir: str | None = None
    run_ids: str | None = None
    fits: bool | None = None
    pruned_by: dict[str, Any] | None = None
    knobs: dict[str, Any] | None = None
    placement: dict[str, Any] | None = None

    @property
    def dp(self) -> int | None:
        """Data-parallel size, None when the sizes are not positive integers or TP x PP x CP does not divide."""
        d = self.dims
        bad = {m.split(" ", 1)[0] for _, m in d.size_problems()} & {"num_gpus", "tp", "pp", "cp"}
        return None if bad or d.world_size_problem() else d.dp

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SweepRow:
        """The typed row of a record (a stage's dict or a parquet row): sizes into ``dims``, ``t_<term>_s`` into
        ``terms_s``, ``dp`` dropped (derived), NaN and numpy scalars made ``None`` and Python values, integer columns
        made ``int`` again (parquet stores a column with gaps as floats).

        Raises:
            SweepRowError: a column the schema does not know, or a required one missing (named).
        """
        data: dict[str, Any] = {}
        sizes: dict[str, Any] = {}
        terms: dict[str, float | None] = {}
        for key, raw in record.items():
            value = _plain(raw)
            if key in DIM_FIELDS:
                sizes[key] = _as_int(value)
            elif key.startswith("t_") and key.endswith("_s"):
                terms[key[2:-2]] = None if value is None else float(value)
            elif key == "dp":
                continue
            elif key in _FIELDS:
                data[key] = _as_int(value) if key in _INT_FIELDS else value
            else:
                raise SweepRowError(f"sweep row column {key!r} is not in the schema (bridgebench.sweep.row.SweepRow)")
        try:
            return cls(dims=ParallelDims(**sizes), terms_s=terms, **data)
        except TypeError as err:
            raise SweepRowError(f"sweep row does not fit the schema: {err}") from None

    def to_record(self) -> dict[str, Any]:
        """The row as one flat record with the parquet columns: the schema's fields in order, the sizes where the
        identity columns are (``dp`` after ``etp``), one ``t_<term>_s`` column per term."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "dims":
                d = self.dims
                out |= {k: getattr(d, k) for k in ("num_gpus", "tp", "pp", "vp", "cp", "ep", "etp")}
                out |= {"dp": self.dp, "mbs": d.mbs, "gbs": d.gbs}
            elif f.name == "terms_s":
                out |= {f"t_{name}_s": value for name, value in self.terms_s.items()}
            else:
                out[f.name] = getattr(self, f.name)
        return out


_FIELDS = {f.name for f in dataclasses.fields(SweepRow)} - {"dims", "terms_s"}


def _int_fields() -> set[str]:
    hints = typing.get_type_hints(SweepRow)
    out = set()
    for name in _FIELDS:
        hint = hints[name]
        args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) else (hint,)
        if int in args and float not in args:
            out.add(name)
    return out


_INT_FIELDS = _int_fields()


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
        if isinstance(value, float) and math.isnan(value):
            return None
    return value


def _as_int(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def records(rows: Iterable[SweepRow | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Flat records of typed rows or of records checked against the schema (:meth:`SweepRow.from_record`)."""
    return [(r if isinstance(r, SweepRow) else SweepRow.from_record(r)).to_record() for r in rows]


def write_rows(path: Path, rows: Iterable[SweepRow | Mapping[str, Any]]) -> None:
    """Write rows to a parquet file (not atomically: the caller renames), every row through the schema.

    Raises:
        SweepRowError: a row that does not fit the schema (nothing written).
    """
    import pandas as pd

    pd.DataFrame(records(rows)).to_parquet(path, index=False)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The records of a parquet file written by :func:`write_rows`, with their types back (ints, ``None``)."""
    import pandas as pd

    return records(pd.read_parquet(path).to_dict("records"))
