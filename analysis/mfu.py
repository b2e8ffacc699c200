"""Model FLOPs utilization (MFU) against versioned per-GPU peaks (``configs/gpu/<name>.yaml``).

MFU = achieved FLOP/s per GPU / peak dense FLOP/s per GPU. bridgebench reports it against two peaks: the BF16 dense
peak (comparable across precisions) and the precision-matched peak (FP8 / MXFP8 / NVFP4 tensor-core rate), each for
model FLOPs only and for model + Newton-Schulz FLOPs. Peaks and their sources live in the GPU YAMLs; every record
carries ``peak_table_version`` so a later correction never silently moves a past MFU.
"""

from __future__ import annotations

from typing import Any, Mapping

import yaml

from bridgebench.config import CONFIG_DIR

PRECISION_TO_PEAK = {"bf16": "bf16", "fp8": "fp8", "fp8_cs": "fp8", "fp8-cs": "fp8", "mxfp8": "mxfp8",
                     "fp8-mx": "mxfp8", "nvfp4": "nvfp4"}


class PeakError(ValueError):
    """No peak is known for this GPU and precision."""


def load_gpu(name: str) -> dict[str, Any]:
    """The GPU facts of ``configs/gpu/<name>.yaml`` (peaks in TFLOP/s, ``gpus_per_node``).

    Raises:
        PeakError: unknown GPU, listing the known ones.
    """
    path = CONFIG_DIR / "gpu" / f"{name.lower()}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (CONFIG_DIR / "gpu").glob("*.yaml"))
        raise PeakError(f"unknown gpu {name!r}; known: {known}")
    return yaml.safe_load(path.read_text())


def peak_tflops(gpu: Mapping[str, Any], precision: str) -> float:
    """Dense peak TFLOP/s per GPU for a precision name (``bf16``, ``fp8``, ``fp8_cs``, ``mxfp8``, ``nvfp4``, or the
    published spellings ``FP8-CS`` / ``FP8-MX``).

    Raises:
        PeakError: unknown precision, or a GPU without that tensor-core format (e.g. MXFP8 on H100).
    """
    key = PRECISION_TO_PEAK.get(str(precision).lower())
    if key is None:
        raise PeakError(f"unknown precision {precision!r}; known: {sorted(PRECISION_TO_PEAK)}")
    value = gpu["peak_tflops"].get(key)
    if value is None:
        raise PeakError(f"{gpu['name']} has no {key} tensor-core peak (format not supported on this GPU)")
    return float(value)


def mfu(tflops_per_gpu: float, gpu: Mapping[str, Any], precision: str = "bf16") -> float:
    """MFU as a fraction (0..1): ``tflops_per_gpu / peak_tflops(gpu, precision)``. Raises :class:`PeakError`."""
    return tflops_per_gpu / peak_tflops(gpu, precision)
