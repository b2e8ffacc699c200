"""The Muon overhead of one point, and Muon's choices as what-ifs: the deal of whole params to data-parallel ranks
(Megatron-Core 0.19.2's ping-pong vs Megatron-LM PR #6379's cost-balanced packing), the TP mode (``duplicated``,
``distributed``, ``blockwise``) and the Newton-Schulz kernel (GEMM, or SYRK -- hypothetical here: it needs
emerging-optimizers >= 0.4, not installed). Each variant is the same point with one choice changed, through
:func:`bridgebench.model.steptime.predict.predict_time` (so every term, including the TP-mode communication and the
release's software level, is priced); see :mod:`bridgebench.model.steptime.optimizer` for the terms.

The AdamW counterpart is the same point with ``optimizer=adam`` on the distributed optimizer with
``overlap_param_gather`` (the AdamW perf recipes' settings: Megatron-Bridge's executed 26.02 - 26.06 dumps,
``tests/data/upstream_recipes``).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import MUON_ASSIGNMENTS, TimeConfig
from bridgebench.model.steptime.optimizer import MuonRankLoads, muon_rank_loads, policy_of
from bridgebench.model.steptime.predict import TimeBreakdown, predict_time

#: TP modes of emerging-optimizers 0.3.0 ``newton_schulz_tp`` (Megatron-Bridge ``optimizer.muon_tp_mode``).
TP_MODES = ("blockwise", "duplicated", "distributed")
#: NS kernels: ``gemm`` (installed), ``syrk`` (Megatron-LM PR #6381, needs emerging-optimizers >= 0.4: hypothetical).
KERNELS = ("gemm", "syrk")


@dataclass(frozen=True, kw_only=True)
class MuonVariant:
    """One what-if: its choices, the predicted Muon step (s) and its optimizer term (s), and whether it is
    ``hypothetical`` (not runnable with the installed software: SYRK; or ``available`` only upstream after 0.19.2:
    the cost-balanced deal)."""

    assignment: str
    tp_mode: str
    kernel: str
    step_s: float
    optimizer_s: float
    ns_s: float
    tp_mode_s: float
    status: str


@dataclass(frozen=True, kw_only=True)
class MuonCost:
    """The Muon overhead model of one point: NS loads per GPU under the ping-pong deal (``ping_pong``) and the
    cost-balanced one (``balanced``), the NS rate and per-matrix cost, the bf16 params each GPU gathers after the
    step, the Muon and AdamW predictions (each naming its release), and every what-if variant."""

    ping_pong: MuonRankLoads
    balanced: MuonRankLoads
    ns_rate: float
    kappa: float
    allgather_bytes: float
    allgather_s: float
    elementwise_s: float
    muon: TimeBreakdown
    adam: TimeBreakdown
    variants: tuple[MuonVariant, ...] = ()
    tp_mode: str = "blockwise"
    kernel: str = "gemm"
    assignment: str = "ping_pong"

    def busiest_s(self, loads: MuonRankLoads) -> float:
        return max(loads.times(self.ns_rate, self.kappa))

    def mean_s(self, loads: MuonRankLoads) -> float:
        times = loads.times(self.ns_rate, self.kappa)
        return sum(times) / len(times)

    @property
    def release(self) -> str:
        return self.muon.release

    @property
    def ratio(self) -> float:
        """Predicted Muon / AdamW step-time ratio."""
        return self.muon.total / self.adam.total

    @property
    def balanced_step_s(self) -> float:
        """Predicted Muon step time with the cost-balanced deal (all else as the point)."""
        for v in self.variants:
            if (v.assignment, v.tp_mode, v.kernel) == ("cost_balanced", self.tp_mode, self.kernel):
                return v.step_s
        return self.muon.total - self.busiest_s(self.ping_pong) + self.busiest_s(self.balanced)


def adam_counterpart(cfg: TimeConfig) -> TimeConfig:
    """The AdamW run of the same point (see the module docstring)."""
    return dataclasses.replace(cfg, optimizer="adam", use_distributed_optimizer=True, overlap_param_gather=True)


def muon_cost(spec: ModelSpec, cfg: TimeConfig, calib: Calibration, what_ifs: bool = True) -> MuonCost:
    """The Muon overhead model of one point (``cfg.optimizer`` taken as ``dist_muon`` unless it is ``muon``), with
    every (deal, TP mode, kernel) variant when ``what_ifs``.

    Raises:
        TimeModelError, bridgebench.model.newton_schulz.NSError: as
            :func:`bridgebench.model.steptime.predict.predict_time`.
    """
    opt = cfg.optimizer if cfg.optimizer in ("muon", "dist_muon") else "dist_muon"
    mcfg = dataclasses.replace(cfg, optimizer=opt)
    muon = predict_time(spec, mcfg, calib)
    adam = predict_time(spec, adam_counterpart(cfg), calib)
    policy = policy_of(mcfg)
    par = cfg.parallelism()
    variants = []
    if what_ifs:
        for assignment, mode, kernel in itertools.product(MUON_ASSIGNMENTS, TP_MODES, KERNELS):
            vcfg = dataclasses.replace(
                mcfg,
                muon_assignment=assignment,
                ns_policy=dataclasses.replace(cfg.ns_policy, tp_mode=mode, kernel=kernel),
            )
            b = predict_time(spec, vcfg, calib)
            status = "hypothetical (SYRK needs emerging-optimizers >= 0.4)" if kernel == "syrk" else (
                "upstream after Megatron-Core 0.19.2 (PR #6379)" if assignment == "cost_balanced" else "installed"
            )  # fmt: skip
            variants.append(
                MuonVariant(
                    assignment=assignment,
                    tp_mode=mode,
                    kernel=kernel,
                    step_s=b.total,
                    optimizer_s=b.terms["optimizer"],
                    ns_s=b.opt.ns,
                    tp_mode_s=b.opt.tp_mode,
                    status=status,
                )
            )
    return MuonCost(
        ping_pong=muon_rank_loads(spec, par, policy, "ping_pong"),
        balanced=muon_rank_loads(spec, par, policy, "cost_balanced"),
        ns_rate=cfg.gpu.peak("bf16") * calib.ns_efficiency,
        kappa=calib.kappa,
        allgather_bytes=muon.opt.allgather_bytes,
        allgather_s=muon.opt.allgather,
        elementwise_s=muon.opt.elementwise,
        muon=muon,
        adam=adam,
        variants=tuple(variants),
        tp_mode=cfg.ns_policy.tp_mode,
        kernel=cfg.ns_policy.kernel,
        assignment=cfg.muon_assignment,
    )
