"""The schema of a stored record (pydantic v2), in one place: what ``collect`` writes and what ``report``,
``compare`` and the notebooks read.

Open by design: every model allows fields it does not declare (``extra="allow"``), so fields added later -- a
scheduler outcome, a new provenance entry -- need no change here and old records stay valid; a field is declared
when a reader relies on its type. Declared fields are optional (``None`` = not measured / not known) except
``record_id`` and ``kind``. Types are strict (a string is not a number, ``true`` is not ``1``); figures must be
finite, step times positive.

:func:`problems` gives ``(field path, message)`` for a record that breaks the schema; the store lists such a record
as skipped, naming its file and the field (:meth:`bridgebench.results.store.ResultStore.scan`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(gt=0)]
NonEmpty = Annotated[str, Field(min_length=1)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class Timestamps(_Open):
    submitted_utc: str | None = None
    started_utc: str | None = None
    ended_utc: str | None = None


class LogCopy(_Open):
    """A log copied into the store (``blobs/``)."""

    name: str
    sha256: str | None = None
    bytes: int | None = None


class Provenance(_Open):
    cluster_id: str | None = None
    slurm_job_id: str | None = None
    config_hash: str | None = None
    release: str | None = None
    container_image: str | None = None
    script_sha256: str | None = None
    logs: list[LogCopy] | None = None


class Window(_Open):
    quality: str | None = None
    count: int | None = None
    first_iteration: int | None = None
    last_iteration: int | None = None


class Series(_Open):
    """Per-iteration (or per-repeat) figures, equal-length lists."""

    iteration: list[int] | None = None
    step_time_s: list[PositiveFloat | None] | None = None
    tflops_per_gpu: list[FiniteFloat | None] | None = None


class OptstepFigures(_Open):
    """One family's (or the total's) figures of the optimizer-step payload (s, FLOP/s)."""

    muon_step_s: PositiveFloat | None = None
    adamw_step_s: PositiveFloat | None = None
    ratio: PositiveFloat | None = None
    ns_time_s: FiniteFloat | None = None
    ns_flops_per_s: FiniteFloat | None = None
    matrices: int | None = None
    muon_step_times_s: list[PositiveFloat] | None = None
    adamw_step_times_s: list[PositiveFloat] | None = None


class OptstepPayload(_Open):
    model: str | None = None
    device: str | None = None
    config_hash: str | None = None
    load: dict[str, Any] | None = None
    families: dict[str, OptstepFigures] | None = None
    total: OptstepFigures | None = None


class StoredRecord(_Open):
    """One record of the results store (:mod:`bridgebench.launch.collect` writes them)."""

    record_id: NonEmpty
    kind: NonEmpty
    name: str | None = None
    run_id: str | None = None
    attempt: int | None = None
    state: str | None = None
    model: str | None = None
    optimizer: str | None = None
    precision: str | None = None
    device: str | None = None
    num_gpus: PositiveInt | None = None
    global_batch_size: PositiveInt | None = None
    seq_length: PositiveInt | None = None
    step_time_s: PositiveFloat | None = None
    tflops_per_gpu: FiniteFloat | None = None
    tokens_per_s_per_gpu: FiniteFloat | None = None
    quality: str | None = None
    timestamps: Timestamps | None = None
    config: dict[str, Any] | None = None
    provenance: Provenance | None = None
    window: Window | None = None
    series: Series | None = None
    optstep: OptstepPayload | None = None


def problems(record: Any) -> list[tuple[str, str]]:
    """``(field path, message)`` of each way ``record`` breaks :class:`StoredRecord` (empty: valid). The path is
    dotted (``optstep.total.muon_step_s``, ``series.step_time_s[3]``); ``(record)`` when the whole value is wrong."""
    try:
        StoredRecord.model_validate(record)
    except ValidationError as err:
        out = []
        for e in err.errors(include_url=False):
            path = ""
            for part in e["loc"]:
                path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
            out.append((path or "(record)", e["msg"]))
        return out
    return []
