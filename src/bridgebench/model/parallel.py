"""The parallel sizes of one run, declared once: :class:`ParallelDims` (world size, TP, PP, VP, CP, EP, ETP, MBS, GBS),
its validation and the sizes derived from it (DP, expert DP, microbatches, NVLink domains). The validity rules
(``bridgebench.config.rules.Point``), the memory and time models' configs, the Newton-Schulz model, the plan and the
sweep rows each hold one ``dims`` field of this type; :class:`DimsView` lets them read ``cfg.tp``, ``cfg.dp`` ...

Megatron-Core's process-group arithmetic (``megatron/core/parallel_state.py`` ``initialize_model_parallel``,
megatron-core 0.19.2): dense data parallelism is what TP x PP x CP leave of the world; expert data parallelism is
what ETP x EP x PP leave (expert layers do not use CP); ETP defaults to TP (``TransformerConfig.__post_init__``).
Microbatches per step follow Megatron-Core's ``get_num_microbatches`` with a constant batch size: GBS / (MBS x DP)
(``megatron/core/num_microbatches_calculator.py``). The shape of this value follows torchtitan's
``torchtitan/distributed/parallel_dims.py`` (a frozen value with its checks and derived sizes).

A :class:`ParallelDims` may hold sizes that break the rules (a sweep enumerates such points and the rules report
them), so building one checks nothing; :meth:`ParallelDims.problems` lists every broken rule and
:meth:`ParallelDims.validate` raises :class:`ParallelDimsError` naming them. The rule ids are those of
``bridgebench.config.rules.RULES`` (``positive_int``, ``world_size``, ``expert_grid``, ``gbs_divisible``,
``microbatches_interleaved``), and the rules report these same messages.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any, Mapping, Self

from bridgebench.errors import BridgebenchError

#: the field names of :class:`ParallelDims`, in declaration order.
DIM_FIELDS = ("num_gpus", "tp", "pp", "vp", "cp", "ep", "etp", "mbs", "gbs")
#: Megatron-Core / Megatron-Bridge names of the same sizes (``model.*``, ``train.*``), read by
#: :meth:`ParallelDims.from_row` as well as the short ones.
MEGATRON_NAMES = {
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "virtual_pipeline_model_parallel_size": "vp",
    "context_parallel_size": "cp",
    "expert_model_parallel_size": "ep",
    "expert_tensor_parallel_size": "etp",
    "micro_batch_size": "mbs",
    "global_batch_size": "gbs",
}
_REQUIRED = ("num_gpus", "tp", "pp", "cp", "ep", "mbs", "gbs")
_OPTIONAL = ("vp", "etp")


class ParallelDimsError(BridgebenchError):
    """Parallel sizes that break a rule; ``problems`` holds ``(rule id, message)`` pairs, the message lists them."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{rule}: {message}" for rule, message in self.problems))


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelDims:
    """The parallel sizes and batch of one run (GPU counts; batches in sequences).

    ``num_gpus`` the world size; ``tp pp vp cp ep etp`` Megatron-Core's tensor / pipeline / virtual-pipeline /
    context / expert / expert-tensor parallel sizes (``vp=None``: no interleaving; ``etp=None``: ETP = TP);
    ``mbs`` / ``gbs`` the micro / global batch sizes (``gbs=None``: no batch, for the Newton-Schulz model, which
    needs none; the rules and :attr:`num_microbatches` need one). Derived: :attr:`dp`, :attr:`edp`,
    :attr:`num_microbatches`, :meth:`domains`. Nothing is checked on construction: :meth:`problems` / :meth:`validate`.
    """

    num_gpus: int
    gbs: int | None = None
    mbs: int = 1
    tp: int = 1
    pp: int = 1
    vp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None

    # ------------------------------------------------------------------------------------------------ construction
    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ParallelDims:
        """The sizes of a row, a dict or keyword arguments: the short names (:data:`DIM_FIELDS`) or Megatron's
        (:data:`MEGATRON_NAMES`); other keys are ignored, absent ones take the defaults; values are kept as given
        (:meth:`problems` judges them).

        Raises:
            ParallelDimsError: ``num_gpus`` absent (rule ``positive_int``).
        """
        kw: dict[str, Any] = {}
        for key, value in row.items():
            name = MEGATRON_NAMES.get(key, key)
            if name in DIM_FIELDS:
                kw[name] = value
        if kw.get("num_gpus") is None:
            raise ParallelDimsError([("positive_int", "num_gpus is required, the row has none")])
        return cls(**kw)

    def replace(self, **changes: Any) -> ParallelDims:
        """A copy with some sizes changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------------------------------------ derived sizes
    @property
    def etp_(self) -> int:
        """Expert tensor-parallel size in effect: ``etp``, or TP when unset."""
        return self.tp if self.etp is None else self.etp

    @property
    def model_size(self) -> int:
        """GPUs of one model replica's dense grid, TP x PP x CP."""
        return self.tp * self.pp * self.cp

    @property
    def expert_grid(self) -> int:
        """GPUs of one expert replica's grid, ETP x EP x PP."""
        return self.etp_ * self.ep * self.pp

    @property
    def dp(self) -> int:
        """Data-parallel size ``num_gpus / (TP x PP x CP)`` (floor; :meth:`problems` says when it does not divide)."""
        return self.num_gpus // self.model_size

    @property
    def edp(self) -> int:
        """Expert data-parallel size ``num_gpus / (ETP x EP x PP)`` (floor)."""
        return self.num_gpus // self.expert_grid

    @property
    def dp_cp(self) -> int:
        """The dense gradient-reduction and optimizer-sharding group, DP x CP (Megatron-Core's
        ``data_parallel_group(with_context_parallel=True)``)."""
        return self.dp * self.cp

    @property
    def num_microbatches(self) -> int:
        """Microbatches per step ``GBS / (MBS x DP)`` (at least 1).

        Raises:
            ParallelDimsError: no ``gbs``.
        """
        if self.gbs is None:
            raise ParallelDimsError([("positive_int", "gbs is required for the number of microbatches, it is None")])
        return max(1, self.gbs // (self.mbs * self.dp))

    def domains(self, nvlink_domain: int) -> int:
        """NVLink domains the run spans: ``ceil(num_gpus / nvlink_domain)`` (``nvlink_domain`` GPUs per domain)."""
        return -(-self.num_gpus // nvlink_domain)

    def expert_group_span(self) -> int:
        """Consecutive ranks one expert-parallel group spans, EP x ETP (Megatron-Core's rank order puts ETP
        innermost): beyond the NVLink domain the token exchange leaves NVLink."""
        return self.ep * self.etp_

    # ------------------------------------------------------------------------------------------------ validation
    def size_problems(self) -> list[tuple[str, str]]:
        """Rule ``positive_int``: every size that is not a positive integer (``vp``/``etp``: or None), named."""
        out = []
        for name in _REQUIRED:
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                out.append(("positive_int", f"{name} must be a positive integer, got {v!r}"))
        for name in _OPTIONAL:
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 1):
                out.append(("positive_int", f"{name} must be a positive integer or None, got {v!r}"))
        return out

    def world_size_problem(self) -> str | None:
        """Rule ``world_size``: the message when TP x PP x CP does not divide the world size, else None."""
        return self._grid_problem("TP x PP x CP", (self.tp, self.pp, self.cp), self.model_size, "")

    def expert_grid_problem(self) -> str | None:
        """Rule ``expert_grid``: the message when ETP x EP x PP does not divide the world size, else None."""
        return self._grid_problem(
            "ETP x EP x PP",
            (self.etp_, self.ep, self.pp),
            self.expert_grid,
            " (expert data-parallel size must be an integer)",
        )

    def _grid_problem(self, names: str, sizes: tuple[int, ...], grid: int, why: str) -> str | None:
        """The message when the product ``grid`` of ``sizes`` (called ``names``) does not divide the world size."""
        if self.num_gpus % grid == 0:
            return None
        return f"world size {self.num_gpus} is not divisible by {names} = {' x '.join(map(str, sizes))} = {grid}{why}"

    def batch_problem(self, vp: int | None = None) -> tuple[str, str] | None:
        """Rules ``gbs_divisible`` (MBS x DP divides GBS) and ``microbatches_interleaved`` (the interleaved schedule
        needs a multiple of PP microbatches); ``vp`` the VP in effect (default: :attr:`vp`). Call with a dividing
        world size only."""
        vp = self.vp if vp is None else vp
        dp, mbs, gbs, pp = self.dp, self.mbs, int(self.gbs or 0), self.pp
        mdp = mbs * dp
        if gbs % mdp:
            return "gbs_divisible", f"global batch size {gbs} is not divisible by MBS x DP = {mbs} x {dp} = {mdp}"
        if vp is not None and pp > 1 and (gbs // mdp) % pp:
            return (
                "microbatches_interleaved",
                f"{gbs // mdp} micro-batches (GBS {gbs} / (MBS {mbs} x DP {dp})) is not a multiple of PP = {pp}, as "
                f"the interleaved schedule (VP = {vp}) needs",
            )
        return None

    def problems(self) -> list[tuple[str, str]]:
        """Every rule these sizes break, ``(rule id, message)``: sizes, world size, expert grid, batch."""
        out = self.size_problems()
        if out:
            return out
        world = self.world_size_problem()
        if world:
            out.append(("world_size", world))
        grid = self.expert_grid_problem()
        if grid:
            out.append(("expert_grid", grid))
        if not world:
            batch = self.batch_problem()
            if batch:
                out.append(batch)
        return out

    def validate(self) -> ParallelDims:
        """``self`` when :meth:`problems` is empty.

        Raises:
            ParallelDimsError: the broken rules, each named.
        """
        found = self.problems()
        if found:
            raise ParallelDimsError(found)
        return self


class DimsView:
    """Read-only views of a ``dims: ParallelDims`` field for the values that hold one (``cfg.tp`` is
    ``cfg.dims.tp``); :meth:`from_flat` builds such a value from flat keyword arguments (sizes and the rest)."""

    __slots__ = ()
    dims: ParallelDims

    num_gpus = property(lambda self: self.dims.num_gpus, doc="World size (GPUs).")
    tp = property(lambda self: self.dims.tp, doc="Tensor-parallel size.")
    pp = property(lambda self: self.dims.pp, doc="Pipeline-parallel size.")
    vp = property(lambda self: self.dims.vp, doc="Virtual-pipeline size (None: no interleaving).")
    cp = property(lambda self: self.dims.cp, doc="Context-parallel size.")
    ep = property(lambda self: self.dims.ep, doc="Expert-parallel size.")
    etp = property(lambda self: self.dims.etp, doc="Expert tensor-parallel size as set (None: TP).")
    etp_ = property(lambda self: self.dims.etp_, doc="Expert tensor-parallel size in effect.")
    mbs = property(lambda self: self.dims.mbs, doc="Micro batch size (sequences).")
    gbs = property(lambda self: self.dims.gbs, doc="Global batch size (sequences).")
    dp = property(lambda self: self.dims.dp, doc="Data-parallel size (ParallelDims.dp).")
    edp = property(lambda self: self.dims.edp, doc="Expert data-parallel size (ParallelDims.edp).")
    num_microbatches = property(lambda self: self.dims.num_microbatches, doc="Microbatches per step.")

    @classmethod
    def from_flat(cls, **kw: Any) -> Self:
        """``cls(dims=ParallelDims.from_row(sizes), **rest)`` from one flat set of keyword arguments: the sizes
        (:data:`DIM_FIELDS`) go to ``dims``, the rest to ``cls``."""
        sizes = {k: kw.pop(k) for k in (*DIM_FIELDS, *MEGATRON_NAMES) if k in kw}
        return cls(dims=ParallelDims.from_row(sizes), **kw)  # type: ignore[call-arg]

    def with_dims(self, **changes: Any) -> Self:
        """A copy with sizes (:data:`DIM_FIELDS`) and other fields changed."""
        sizes = {k: changes.pop(k) for k in DIM_FIELDS if k in changes}
        if sizes:
            changes["dims"] = dataclasses.replace(self.dims, **sizes)
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]
