"""Model FLOPs utilization (MFU) against versioned per-GPU peaks (``configs/gpu/<name>.yaml``).

MFU = achieved FLOP/s per GPU / peak dense FLOP/s per GPU. bridgebench reports it against two peaks: the BF16 dense
peak (comparable across precisions) and the precision-matched peak (FP8 / MXFP8 / NVFP4 tensor-core rate), each for
model FLOPs only and for model + Newton-Schulz FLOPs. Peaks and their sources live in the GPU YAMLs; every record
carries ``peak_table_version`` so a later correction never silently moves a past MFU. Which precision spelling maps
to which peak key is declared in ``configs/precision`` (``bridgebench.config.catalog.peak_key``).
"""

from __future__ import annotations

from typing import Any, Mapping

from bridgebench.errors import BridgebenchError

#: keys of ``gpu.peak_tflops`` (the tensor-core formats the GPU YAMLs tabulate)
PEAK_KEYS = ("bf16", "fp8", "mxfp8", "nvfp4")


class PeakError(BridgebenchError):
    """No peak is known for this GPU and precision."""


def peak_tflops(gpu: Mapping[str, Any], peak_key: str) -> float:
    """Dense peak TFLOP/s per GPU for a peak key (``bf16``, ``fp8``, ``mxfp8``, ``nvfp4``).

    Args:
        gpu: a ``configs/gpu`` mapping (``name``, ``peak_tflops``).
        peak_key: the precision's ``peak`` (``configs/precision/<name>.yaml``).

    Raises:
        PeakError: unknown key, or a GPU without that tensor-core format (e.g. MXFP8 on H100).
    """
    if peak_key not in PEAK_KEYS:
        raise PeakError(f"unknown precision peak key {peak_key!r}; known: {list(PEAK_KEYS)}")
    value = gpu["peak_tflops"].get(peak_key)
    if value is None:
        raise PeakError(f"{gpu['name']} has no {peak_key} tensor-core peak (format not supported on this GPU)")
    return float(value)


def mfu(tflops_per_gpu: float, gpu: Mapping[str, Any], peak_key: str = "bf16") -> float:
    """MFU as a fraction (0..1): ``tflops_per_gpu / peak_tflops(gpu, peak_key)``. Raises :class:`PeakError`."""
    return tflops_per_gpu / peak_tflops(gpu, peak_key)
