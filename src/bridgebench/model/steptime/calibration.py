"""The fitted and hand-set constants of the step-time model (the ``time`` node of ``configs/calibration/<name>.yaml``,
written by ``bridgebench calibrate --write``; :mod:`bridgebench.model.steptime.fit` fits them).

Fitted on NVIDIA's published tables: ``efficiency[(gpu, precision class)]`` (the fraction of the datasheet rates --
tensor-core peak -- the GEMMs reach, on top of the GEMM shape law), ``c_layer`` (seconds per layer per microbatch:
launches and host work), ``host_moe`` (seconds of host work per MoE layer per microbatch that a host-synchronised token
dispatch exposes, :func:`bridgebench.model.steptime.predict.host_exposed`) and ``host_moe_expert`` (its part per
expert the GPU holds), the release levels (``groups``, ``family_level`` and, for a model with no published group,
``level_share``: the line of the log level in the non-GEMM share of the step, YAML ``level_by_share``;
:mod:`bridgebench.model.steptime.release`) and the uncertainty bands (``bands``: the root mean square of the held-out
log errors of a group's rows, each predicted by a calibration fitted without that row's release, partially pooled
towards its GPU and precision class's, as a relative +-; ``band_by_gpu`` a GPU and precision class,
``band_default`` all rows; :func:`bridgebench.model.steptime.fit.bands_from`) and the conformal bands by distance from
the calibration that predictions use (``conformal``, :mod:`bridgebench.model.steptime.bands`). Fitted on the blog's
Table 1 (:mod:`bridgebench.validation.muon_fit`): ``kappa`` (seconds per Muon matrix) and ``ns_efficiency``
(Newton-Schulz GEMMs' fraction of the BF16 peak). Measured on a lent GPU: ``measured_rates`` (YAML
``measured_gemm_rate``: a large GEMM's fraction of the datasheet peak per GPU and precision class,
``bridgebench.validation.gemm_fit.measured_gemm_rates``), whose ratio is that GPU's class ratio. Hand-set, first
principles (no GPU was lent to measure it):
``default_efficiency`` (a GPU and precision class with no published row, no class ratio and no calibrated GPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from bridgebench.model.steptime.bands import ConformalBands
from bridgebench.model.steptime.config import TimeModelError
from bridgebench.model.steptime.release import GroupLevel, LevelTable, ShareLevel


@dataclass(kw_only=True)
class Calibration:
    """See the module docstring. Keys: ``(gpu, precision class)`` for efficiencies and GPU bands, ``(model, gpu,
    peak key)`` for groups and group bands."""

    efficiency: dict[tuple[str, str], float] = field(default_factory=dict)
    rows: dict[tuple[str, str], int] = field(default_factory=dict)
    measured_rates: dict[tuple[str, str], float] = field(default_factory=dict)
    c_layer: float = 0.0
    host_moe: float = 0.0
    host_moe_expert: float = 0.0
    kappa: float = 1.4e-4
    ns_efficiency: float = 0.5
    default_efficiency: float = 0.35
    groups: dict[tuple[str, str, str], GroupLevel] = field(default_factory=dict)
    family_level: dict[str, float] = field(default_factory=dict)
    level_share: ShareLevel | None = None
    bands: dict[tuple[str, str, str], float] = field(default_factory=dict)
    band_by_gpu: dict[tuple[str, str], float] = field(default_factory=dict)
    band_default: float = 0.15
    conformal: ConformalBands | None = None

    def efficiency_of(
        self, gpu: str, pclass: str, peak_of: Callable[[str], float | None] | None = None
    ) -> tuple[float, str]:
        """(efficiency, where it came from), a log-additive GPU x precision-class prior ``log e = a_gpu + b_class``
        for what was not fitted:

        - ``fitted``: the (GPU, class) cell was calibrated;
        - ``gpu x measured class ratio``: this GPU has another class fitted, and large GEMMs were measured on it
          at both classes (:attr:`measured_rates`, ``bridgebench.validation.gemm_fit.measured_gemm_rates``): its
          efficiency there times the measured ratio -- H100 BF16 = H100 FP8 x 0.763 / 0.694. Blackwell's fitted
          BF16 / FP8 ratio (1.31) is not Hopper's: on the shared ablation rows at H100 BF16 (dgxc-benchmarking
          GPT-3 175B, Llama 3.1 70B / 405B, Grok-1) the one-calibration MAPE is 8.5 % with the measured ratio
          against 8.9 % with Blackwell's (``benchmarks/validate_ablations.py``);
        - ``gpu x class``: this GPU has another class fitted; its efficiency there times the class ratio measured
          on the GPUs fitted at both (geometric mean; :meth:`class_shift`) -- e.g. a BF16 from FP8 and the
          BF16 / FP8 ratio of GB200 and GB300;
        - ``sibling mean``: nothing of this GPU was fitted (a GPU never published, e.g. A100): the geometric mean
          of the other GPUs' efficiencies at this class;
        - ``other precision``: no GPU was fitted at this class: this GPU's efficiency of another class times
          ``sqrt(that class's peak / this one's)`` -- half-way between the same fraction of the peak and the same
          absolute rate (needs ``peak_of``, class -> dense peak);
        - ``default``: :attr:`default_efficiency`.

        Chosen by holding out what was calibrated (``configs/calibration/default.yaml`` of 2026-11-27): each fitted
        cell predicted from the others, mean ``|log|`` error of the prior -- a class held out on its GPU:
        ``gpu x class`` 0.126 against the same class on the other GPUs 0.198 (6 cells); a GPU held out: the same
        class on the other GPUs 0.194 against a GPU-generation prior (every calibrated GPU's efficiency at this
        class through its class ratio, pooled) 0.244 (9 cells). A GPU never published does not take the efficiency
        of its chip's other system although the fit ties them (:func:`bridgebench.model.steptime.fit.chip_of`):
        each GPU of the published rows left out in turn (a variant of ``benchmarks/level_share_selection.py``'s
        last line with a ``same chip`` tier, not kept), that prior gives 23.0 % MAPE against 19.7 % for the sibling
        mean before the tie (20.0 % shipped) -- HGX B300 fitted alone reads 0.33 for the chip GB300 reads 0.59 on,
        the systems' scale-out differences landing in the GEMM rate when nothing else of the chip holds it. Tests:
        ``tests/model/test_steptime_priors.py``."""
        value = self.efficiency.get((gpu, pclass))
        if value is not None:
            return value, "fitted"
        measured = [
            v * self.measured_rates[(gpu, pclass)] / self.measured_rates[(gpu, have)]
            for (g, have), v in self.efficiency.items()
            if g == gpu and (gpu, have) in self.measured_rates and (gpu, pclass) in self.measured_rates
        ]
        if measured:
            return math.exp(sum(math.log(v) for v in measured) / len(measured)), "gpu x measured class ratio"
        via = self._through_class_ratio(gpu, pclass)
        if via is not None:
            return via, "gpu x class"
        same = [v for (_, p), v in self.efficiency.items() if p == pclass]
        if same:
            return math.exp(sum(math.log(v) for v in same) / len(same)), "sibling mean"
        if peak_of is not None and peak_of(pclass):
            here = peak_of(pclass) or 1.0
            other = [
                v * math.sqrt((peak_of(p) or here) / here)
                for (g, p), v in self.efficiency.items()
                if g == gpu and peak_of(p)
            ]
            if other:
                return math.exp(sum(math.log(v) for v in other) / len(other)), "other precision"
        return self.default_efficiency, "default"

    def bf16_gain(self, gpu: str, pclass: str, peak_of: Callable[[str], float | None] | None = None) -> float:
        """This GPU's BF16 efficiency over its ``pclass`` efficiency (:meth:`efficiency_of` for both; 1 for BF16
        itself): the rate of the BF16 work of a low-precision point -- the attention core (unless
        ``fp8_dot_product_attention``), the router, the output layer (unless ``fp8_output_proj``) -- relative to its
        low-precision GEMMs. That work runs the same BF16 kernels as in a BF16 run, so it takes the BF16 class's
        fraction of the BF16 peak, not the low-precision class's (H100: the measured large-GEMM ratio, 1.10; GB200
        / GB300: the fitted BF16 and FP8 classes)."""
        if pclass == "bf16":
            return 1.0
        return self.efficiency_of(gpu, "bf16", peak_of)[0] / self.efficiency_of(gpu, pclass, peak_of)[0]

    def class_shift(self, have: str, want: str) -> float | None:
        """Mean of ``log e(g, want) - log e(g, have)`` over the GPUs fitted at both classes (None when none is):
        the ``b_want - b_have`` of the GPU x class prior (:meth:`efficiency_of`)."""
        diffs = [
            math.log(self.efficiency[(g, want)] / v)
            for (g, c), v in self.efficiency.items()
            if c == have and (g, want) in self.efficiency
        ]
        return sum(diffs) / len(diffs) if diffs else None

    def _through_class_ratio(self, gpu: str, pclass: str) -> float | None:
        """This GPU's efficiency at ``pclass`` from its fitted classes and the measured class ratios (geometric mean
        over its classes with a ratio; None when none has one)."""
        logs = []
        for (g, have), v in self.efficiency.items():
            shift = self.class_shift(have, pclass) if g == gpu and have != pclass else None
            if shift is not None:
                logs.append(math.log(v) + shift)
        return math.exp(sum(logs) / len(logs)) if logs else None

    def log_level(self, group: tuple[str, str, str], family: str, release_index: float | None) -> tuple[float, str]:
        """(log software level of a group at a release, its source: ``group``, ``same model``, ``family mean``,
        ``none``), see :class:`bridgebench.model.steptime.release.LevelTable`."""
        return LevelTable(groups=self.groups, family_mean=self.family_level).log_level(group, family, release_index)

    def share_level(self, share: float) -> float:
        """The log level of a model with no published group at non-GEMM share ``share`` (:attr:`level_share`,
        :class:`bridgebench.model.steptime.release.ShareLevel`).

        Raises:
            TimeModelError: the calibration has no share fit.
        """
        if self.level_share is None:
            raise TimeModelError("this calibration has no level_by_share fit (refit with bridgebench calibrate)")
        return self.level_share.log_level(share)

    def band(self, group: tuple[str, str, str], gpu: str, pclass: str) -> tuple[float, str]:
        """(+- relative uncertainty, its source: ``group``, ``gpu`` or ``all rows``)."""
        if group in self.bands:
            return self.bands[group], "group"
        if (gpu, pclass) in self.band_by_gpu:
            return self.band_by_gpu[(gpu, pclass)], "gpu"
        return self.band_default, "all rows"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Calibration:
        """From the ``time`` node of a calibration YAML (``efficiency: {gpu: {class: {value, rows}}}``, ``groups:
        {model: {gpu: {key: {...}}}}``, ``bands`` likewise).

        Raises:
            TimeModelError: a non-positive constant or efficiency, or a malformed node.
        """
        eff: dict[tuple[str, str], float] = {}
        rows: dict[tuple[str, str], int] = {}
        try:
            for gpu, by_class in (data.get("efficiency") or {}).items():
                for pclass, value in by_class.items():
                    if isinstance(value, Mapping):
                        rows[(gpu, pclass)] = int(value.get("rows", 0))
                        value = value["value"]
                    eff[(gpu, pclass)] = float(value)
            groups = {
                (model, gpu, key): GroupLevel.from_mapping(g)
                for model, by_gpu in (data.get("groups") or {}).items()
                for gpu, by_key in by_gpu.items()
                for key, g in by_key.items()
            }
            bands = {
                (model, gpu, key): float(v)
                for model, by_gpu in (data.get("bands") or {}).items()
                for gpu, by_key in by_gpu.items()
                for key, v in by_key.items()
            }
            band_by_gpu = {
                (gpu, pclass): float(v)
                for gpu, by in (data.get("band_by_gpu") or {}).items()
                for pclass, v in by.items()
            }
            family_level = {str(k): float(v) for k, v in (data.get("family_level") or {}).items()}
            measured = {
                (gpu, pclass): float(v)
                for gpu, by in (data.get("measured_gemm_rate") or {}).items()
                for pclass, v in by.items()
            }
            level_share = ShareLevel.from_mapping(data["level_by_share"]) if data.get("level_by_share") else None
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise TimeModelError(f"malformed time calibration: {err!r}") from err
        cal = cls(
            efficiency=eff,
            rows=rows,
            measured_rates=measured,
            c_layer=float(data.get("c_layer_s", 0.0)),
            host_moe=float(data.get("host_moe_s", 0.0)),
            host_moe_expert=float(data.get("host_moe_expert_s", 0.0)),
            kappa=float(data.get("kappa_s", 1.4e-4)),
            ns_efficiency=float(data.get("ns_efficiency", 0.5)),
            default_efficiency=float(data.get("default_efficiency", 0.35)),
            groups=groups,
            family_level=family_level,
            level_share=level_share,
            bands=bands,
            band_by_gpu=band_by_gpu,
            band_default=float(data.get("band_default", 0.15)),
        )
        if data.get("conformal"):
            cal.conformal = ConformalBands.from_mapping(data["conformal"], groups, eff)
        bad = {k: v for k, v in (eff | measured).items() if not v > 0} | {
            k: getattr(cal, k) for k in ("kappa", "ns_efficiency", "default_efficiency") if not getattr(cal, k) > 0
        }
        if bad or min(cal.c_layer, cal.host_moe, cal.host_moe_expert, cal.band_default) < 0:
            raise TimeModelError(
                "calibration constants must be positive (efficiency, measured_gemm_rate, kappa_s, ns_efficiency; "
                "c_layer_s, host_moe_s, host_moe_expert_s, band_default >= 0), "
                f"got {bad or (cal.c_layer, cal.host_moe, cal.host_moe_expert, cal.band_default)}"
            )
        return cal

    def to_mapping(self) -> dict[str, Any]:
        """The ``time`` node of a calibration YAML (inverse of :meth:`from_mapping`)."""
        eff: dict[str, dict[str, Any]] = {}
        for (gpu, pclass), value in sorted(self.efficiency.items()):
            eff.setdefault(gpu, {})[pclass] = {"value": round(value, 6), "rows": self.rows.get((gpu, pclass), 0)}
        groups: dict[str, dict[str, dict[str, Any]]] = {}
        for (model, gpu, key), g in sorted(self.groups.items()):
            groups.setdefault(model, {}).setdefault(gpu, {})[key] = g.to_mapping()
        bands: dict[str, dict[str, dict[str, float]]] = {}
        for (model, gpu, key), v in sorted(self.bands.items()):
            bands.setdefault(model, {}).setdefault(gpu, {})[key] = round(v, 4)
        measured: dict[str, dict[str, float]] = {}
        for (gpu, pclass), v in sorted(self.measured_rates.items()):
            measured.setdefault(gpu, {})[pclass] = round(v, 4)
        by_gpu: dict[str, dict[str, float]] = {}
        for (gpu, pclass), v in sorted(self.band_by_gpu.items()):
            by_gpu.setdefault(gpu, {})[pclass] = round(v, 4)
        out = {
            "c_layer_s": self.c_layer,
            "host_moe_s": self.host_moe,
            "host_moe_expert_s": self.host_moe_expert,
            "kappa_s": self.kappa,
            "ns_efficiency": self.ns_efficiency,
            "default_efficiency": self.default_efficiency,
            "efficiency": eff,
            "measured_gemm_rate": measured,
            "family_level": {k: round(v, 6) for k, v in sorted(self.family_level.items())},
            **({"level_by_share": self.level_share.to_mapping()} if self.level_share else {}),
            "groups": groups,
            "band_default": round(self.band_default, 4),
            "band_by_gpu": by_gpu,
            "bands": bands,
        }
        if self.conformal is not None:
            out["conformal"] = self.conformal.to_mapping()
        return out
