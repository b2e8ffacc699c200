"""Decompose the per-matrix Muon cost: kernel launch latency, kernels per param (torch.profiler), FP8 GEMM rates."""

import json
import os
import time

import torch
from emerging_optimizers.orthogonalized_optimizers.muon import Muon
from torch.profiler import ProfilerActivity, profile

dev = torch.device("cuda")
OUT = os.environ.get("OUT", ".")
res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
x = torch.zeros(16, device=dev)
for _ in range(100):
    x.add_(1)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(5000):
    x.add_(1)
torch.cuda.synchronize()
res["launch_s_per_kernel"] = (time.perf_counter() - t) / 5000
print("launch", res["launch_s_per_kernel"] * 1e6, "us", flush=True)

for prec in ("medium", "high"):
    ps = [torch.nn.Parameter(torch.randn(128, 128, device=dev)) for _ in range(32)]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = Muon(ps, lr=1e-3, momentum=0.95, weight_decay=0.01, nesterov=True, fp32_matmul_prec=prec)
    opt.step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        opt.step()
        torch.cuda.synchronize()
    evs = prof.key_averages()
    n_kernels = sum(e.count for e in evs if e.device_type == torch.autograd.DeviceType.CUDA)
    syncs = sum(
        e.count
        for e in evs
        if "synchronize" in e.key.lower() or "item" in e.key.lower() or "_local_scalar_dense" in e.key
    )
    gpu_us = sum(e.self_device_time_total for e in evs if e.device_type == torch.autograd.DeviceType.CUDA)
    t0 = time.perf_counter()
    opt.step()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    res[f"muon_{prec}"] = dict(
        params=32,
        kernels_per_param=n_kernels / 32,
        host_syncs=syncs,
        gpu_busy_s_per_param=gpu_us / 1e6 / 32,
        wall_s_per_param=wall / 32,
    )
    print(prec, res[f"muon_{prec}"], flush=True)
    top = sorted(evs, key=lambda e: -e.cpu_time_total)[:12]
    res[f"top_cpu_{prec}"] = [(e.key, e.count, e.cpu_time_total) for e in top]
    print([(e.key, e.count, round(e.cpu_time_total)) for e in top], flush=True)
fp8 = []
if hasattr(torch, "_scaled_mm"):
    for m, n, k in [
        (8192, 8192, 8192),
        (4096, 4096, 4096),
        (16384, 8192, 8192),
        (2048, 7168, 4096),
        (1024, 7168, 2048),
    ]:
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device=dev)
        f = lambda a=a, b=b, one=one: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        for _ in range(3):
            f()
        torch.cuda.synchronize()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(20):
            f()
        e.record()
        torch.cuda.synchronize()
        dt = s.elapsed_time(e) / 1e3 / 20
        fp8.append(dict(m=m, n=n, k=k, mean_s=dt, tflops=2.0 * m * n * k / dt / 1e12))
        print(fp8[-1], flush=True)
res["fp8_tensorwise"] = fp8
json.dump(res, open(os.path.join(OUT, "gpu_measurements2.json"), "w"), indent=1)
