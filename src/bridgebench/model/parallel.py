"""Derived parallel sizes of a point, shared by the memory and time models' configs.

Megatron-Core's process-group arithmetic (``megatron/core/parallel_state.py`` ``initialize_model_parallel``,
megatron-core 0.19.2): dense data parallelism is what TP x PP x CP leave of the world; expert data parallelism is
what ETP x EP x PP leave (expert layers do not use CP); ETP defaults to TP. Microbatches per step follow
Megatron-Core's ``get_num_microbatches`` with a constant batch size: GBS / (MBS x DP).
"""

from __future__ import annotations


class ParallelSizes:
    """Mixin for a frozen dataclass with ``num_gpus``, ``tp``, ``pp``, ``cp``, ``ep``, ``etp`` (None: TP), ``mbs``
    and ``gbs`` fields (GPU counts and sequences)."""

    num_gpus: int
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int | None
    mbs: int
    gbs: int

    @property
    def etp_(self) -> int:
        """Expert tensor-parallel size: ``etp``, or TP when unset."""
        return self.etp or self.tp

    @property
    def dp(self) -> int:
        """Data-parallel size ``num_gpus / (TP x PP x CP)``."""
        return self.num_gpus // (self.tp * self.pp * self.cp)

    @property
    def edp(self) -> int:
        """Expert data-parallel size ``num_gpus / (ETP x EP x PP)``."""
        return self.num_gpus // (self.etp_ * self.ep * self.pp)

    @property
    def num_microbatches(self) -> int:
        """Microbatches per step ``GBS / (MBS x DP)`` (at least 1)."""
        return max(1, self.gbs // (self.mbs * self.dp))
