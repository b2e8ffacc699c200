"""What an optimizer name means, declared once: is it Muon, and does it use the layer-wise distributed optimizer.

Source: megatron-core 0.19.2 ``megatron/core/optimizer/__init__.py`` (``get_megatron_optimizer``): the names
``muon`` / ``dist_muon`` select emerging-optimizers' Muon through ``TensorParallelMuon``; the ``dist_`` prefix wraps it
in ``LayerWiseDistributedOptimizer`` (whole parameters dealt to data-parallel ranks); ``adam`` / ``sgd`` are the
classic optimizers, sharded by ``DistributedOptimizer`` when ``use_distributed_optimizer`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridgebench.errors import BridgebenchError

#: Megatron-Core optimizer names bridgebench knows (``OptimizerConfig.optimizer``).
KNOWN = ("adam", "sgd", "muon", "dist_muon")


class UnknownOptimizerError(BridgebenchError):
    """An optimizer name Megatron-Core does not have."""


@dataclass(frozen=True, kw_only=True)
class OptimizerKind:
    """Facts of one ``OptimizerConfig.optimizer`` name."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in KNOWN:
            raise UnknownOptimizerError(f"unknown optimizer {self.name!r}; Megatron-Core 0.19.2 knows {list(KNOWN)}")

    @property
    def is_muon(self) -> bool:
        """Muon (matrices orthogonalized by Newton-Schulz; 1-D params, embedding and output layer by Adam)."""
        return self.name in ("muon", "dist_muon")

    @property
    def layer_wise(self) -> bool:
        """Megatron-Core's layer-wise distributed optimizer (``dist_`` prefix)."""
        return self.name.startswith("dist_")

    @property
    def family(self) -> str:
        """``muon`` or ``adamw`` (Megatron-Core's ``adam`` is AdamW with decoupled weight decay)."""
        return "muon" if self.is_muon else ("adamw" if self.name == "adam" else self.name)


def family(name: str) -> str:
    """``muon`` / ``adamw`` / other of any optimizer label (a record's or a rule point's), without validating it:
    names containing ``muon`` are Muon (``muon``, ``dist_muon``, a record's ``muon``), ``adam`` / ``adamw`` AdamW."""
    text = str(name).lower()
    if "muon" in text:
        return "muon"
    return "adamw" if text in ("adam", "adamw") else text
