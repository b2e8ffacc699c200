"""FP32 matmul precision on this CPU: why the optimizer-step payload runs ``highest`` on a CPU.

Prints, for emerging-optimizers ``newton_schulz`` (one 768x2048 FP32 matrix, 5 quintic steps, one thread) and a plain
2048^3 matmul in FP32 and BF16, the GFLOP/s at torch float32 matmul precision ``highest`` / ``high`` / ``medium``,
twice: on this CPU as it is, and with oneDNN, MKL and ATen held to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2``,
``MKL_ENABLE_INSTRUCTIONS=AVX2``, ``ATEN_CPU_CAPABILITY=avx2``) -- an AVX2-only CPU (no AVX512_BF16, no AMX), where
``medium`` routes FP32 matmuls through BF16 without native instructions.

    .venv/bin/python benchmarks/bench_cpu_matmul.py

FLOPs: ``bridgebench.model.newton_schulz.ns_flops`` (GEMM kernel) and 2 m n k for the plain matmul.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def _measure() -> dict:
    import time

    import torch
    from emerging_optimizers.orthogonalized_optimizers.muon_utils import newton_schulz
    from emerging_optimizers.utils import fp32_matmul_precision

    from bridgebench.model.newton_schulz import ns_flops

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(768, 2048, generator=g)
    a, b = torch.randn(2048, 2048, generator=g), torch.randn(2048, 2048, generator=g)
    out = {}

    def best(fn, n=2):
        fn()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    for prec in ("highest", "high", "medium"):
        with fp32_matmul_precision(prec):
            t = best(lambda: newton_schulz(x, steps=5, coefficient_type="quintic"))
            out[f"newton_schulz fp32 @{prec}"] = ns_flops(768, 2048, 5, "gemm") / t / 1e9
            t = best(lambda: a @ b)
            out[f"matmul fp32 @{prec}"] = 2 * 2048**3 / t / 1e9
    ab, bb = a.bfloat16(), b.bfloat16()
    t = best(lambda: ab @ bb)
    out["matmul bf16"] = 2 * 2048**3 / t / 1e9
    return out


def main() -> None:
    if "--child" in sys.argv:
        print(json.dumps(_measure()))
        return
    cols = {}
    for label, extra in (("this CPU", {}), ("held to AVX2", AVX2_ONLY)):
        env = {**os.environ, **extra}
        res = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True)
        cols[label] = json.loads(res.stdout.strip().splitlines()[-1])
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    native = [f for f in ("avx512_bf16", "amx_bf16") if f" {f}" in flags]
    print(f"CPU native BF16: {', '.join(native) or 'none'}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'GFLOP/s (one thread)':<32}" + "".join(f"{c:>16}" for c in cols))
    for key in cols["this CPU"]:
        print(f"{key:<32}" + "".join(f"{cols[c][key]:>16.1f}" for c in cols))


if __name__ == "__main__":
    main()
