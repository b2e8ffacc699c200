"""Dense GEMM efficiency at transformer-layer shapes (issue 22 item 6: the GEMM shape law): for hidden size h, FFN size
f = 4h (dense; the law reads the shape, not the model), tensor-parallel size t and tokens per micro-batch m, the four
layer GEMMs QKV (m, 3h/t, h), attention projection (m, h, h/t), fc1 (m, f/t, h) and fc2 (m, h, f/t), in BF16
(torch matmul) and FP8 e4m3 with tensor-wise scales (torch._scaled_mm -> bf16). Timing: CUDA events, median of 20
reps after 3 warm-ups. Writes $OUT/gpu_gemm_shapes.json."""

import json
import os
import time

import torch

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
res = {
    "device": torch.cuda.get_device_name(0),
    "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
}
print(res, flush=True)


def bench(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    return times[len(times) // 2]


shapes = set()
for h in (1024, 1536, 2048, 2560, 3072, 4096, 5120, 8192, 12288, 16384):
    for t in (1, 2, 4, 8):
        for m in (2048, 8192):
            f = 4 * h
            for name, n, k in (("qkv", 3 * h // t, h), ("proj", h, h // t), ("fc1", f // t, h), ("fc2", h, f // t)):
                shapes.add((name, h, t, m, n, k))
rows = []
t0 = time.time()
one = torch.tensor(1.0, device=dev)
for name, h, t, m, n, k in sorted(shapes):
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    fl = 2.0 * m * n * k
    bf16_s = bench(lambda a=a, b=b: a @ b)
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
    try:
        fp8_s = bench(lambda a8=a8, b8=b8: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    except Exception as exc:  # noqa: BLE001
        print("fp8", name, m, n, k, repr(exc)[:200], flush=True)
        fp8_s = None
    rows.append(
        dict(
            gemm=name,
            hidden=h,
            tp=t,
            m=m,
            n=n,
            k=k,
            flops=fl,
            bf16_median_s=bf16_s,
            bf16_tflops=fl / bf16_s / 1e12,
            fp8_median_s=fp8_s,
            fp8_tflops=None if fp8_s is None else fl / fp8_s / 1e12,
        )
    )
    del a, b, a8, b8
print(f"{len(rows)} shapes in {time.time() - t0:.1f}s", flush=True)
res["layer_gemms"] = rows
json.dump(res, open(os.path.join(OUT, "gpu_gemm_shapes.json"), "w"), indent=1)
for r in rows[:: max(1, len(rows) // 25)]:
    print(
        r["gemm"], r["hidden"], r["tp"], r["m"], f"{r['bf16_tflops']:.0f}", r["fp8_tflops"] and f"{r['fp8_tflops']:.0f}"
    )
