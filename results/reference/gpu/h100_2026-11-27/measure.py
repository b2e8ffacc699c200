"""GPU measurements for bridgebench's time model (issue 22 item 6): dense and grouped GEMM efficiency by shape,
Newton-Schulz throughput at Kimi K2 / Qwen3 30B-A3B matrix shapes, and the per-matrix cost of emerging-optimizers'
Muon step. Prints progress; writes one JSON to $OUT/gpu_measurements.json."""

import json
import os
import platform
import sys
import time

import torch

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
props = torch.cuda.get_device_properties(0)
meta = {
    "device": props.name,
    "sm_count": props.multi_processor_count,
    "capability": list(torch.cuda.get_device_capability()),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "python": platform.python_version(),
    "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
}
print(meta, flush=True)
res = {"meta": meta}


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
    return times[len(times) // 2], times[0], times[-1]


t0 = time.time()
# A. dense bf16 GEMMs: out[M,N] = A[M,K] @ B[K,N]
dense = []
sizes = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
shapes = set()
for x in sizes:
    shapes.add((x, x, x))
for big in (4096, 8192):
    for small in (128, 256, 512, 1024, 2048):
        shapes.add((small, big, big))
        shapes.add((big, small, big))
        shapes.add((big, big, small))
for m, n, k in sorted(shapes):
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    reps = 50 if m * n * k < 2**33 else 20
    med, lo, hi = bench(lambda a=a, b=b: a @ b, reps=reps)
    fl = 2.0 * m * n * k
    dense.append(dict(m=m, n=n, k=k, median_s=med, min_s=lo, max_s=hi, reps=reps, tflops=fl / med / 1e12))
res["dense_bf16"] = dense
print(
    f"dense done {time.time() - t0:.1f}s; 8192^3 {[d['tflops'] for d in dense if d['m'] == d['n'] == d['k'] == 8192]}",
    flush=True,
)

# B. grouped GEMMs (MoE experts): torch._grouped_mm, G local experts with T tokens each
grouped = []
if hasattr(torch, "_grouped_mm"):
    cases = [
        ("kimi_k2_fc1_ep64", 6, 7168, 4096),
        ("kimi_k2_fc2_ep64", 6, 2048, 7168),
        ("qwen3_30b_fc1_ep8", 16, 2048, 1536),
        ("qwen3_30b_fc2_ep8", 16, 768, 2048),
    ]
    for name, g, k, n in cases:
        for t in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
            try:
                x = torch.randn(g * t, k, device=dev, dtype=torch.bfloat16)
                w = torch.randn(g, n, k, device=dev, dtype=torch.bfloat16).transpose(-2, -1)
                offs = torch.arange(t, g * t + 1, t, device=dev, dtype=torch.int32)
                fn = lambda x=x, w=w, offs=offs: torch._grouped_mm(x, w, offs=offs)
                med, lo, hi = bench(fn, reps=30)
                fl = 2.0 * g * t * k * n
                # the same work as a loop of per-expert GEMMs (what a non-grouped path launches)
                xs = x.view(g, t, k)
                fn2 = lambda xs=xs, w=w, g=g: [xs[i] @ w[i] for i in range(g)]
                med2, _, _ = bench(fn2, reps=30)
                grouped.append(
                    dict(
                        case=name,
                        experts=g,
                        tokens_per_expert=t,
                        k=k,
                        n=n,
                        median_s=med,
                        min_s=lo,
                        max_s=hi,
                        tflops=fl / med / 1e12,
                        loop_median_s=med2,
                        loop_tflops=fl / med2 / 1e12,
                    )
                )
                del x, w
            except Exception as exc:  # noqa: BLE001
                grouped.append(dict(case=name, tokens_per_expert=t, error=repr(exc)[:300]))
                break
res["grouped_bf16"] = grouped
print(f"grouped done {time.time() - t0:.1f}s ({len(grouped)} rows)", flush=True)

# C. Newton-Schulz (emerging-optimizers 0.3.0 muon_utils.newton_schulz, quintic, 5 steps) per shape and precision
from emerging_optimizers.orthogonalized_optimizers import muon_utils  # noqa: E402

shapes_by_model = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "shapes.json")))
ns = []
for model, mats in shapes_by_model.items():
    for mm in mats:
        r, c = mm["rows"], mm["cols"]
        m_, n_ = min(r, c), max(r, c)
        fl = 5 * (4.0 * m_ * m_ * n_ + 2.0 * m_**3)
        g = torch.randn(r, c, device=dev, dtype=torch.float32)
        for prec in ("medium", "high"):
            torch.set_float32_matmul_precision(prec)
            med, lo, hi = bench(lambda g=g: muon_utils.newton_schulz(g, steps=5, coefficient_type="quintic"), reps=10)
            ns.append(
                dict(
                    model=model,
                    rows=r,
                    cols=c,
                    count=mm["count"],
                    family=mm["family"],
                    fp32_matmul_prec=prec,
                    median_s=med,
                    min_s=lo,
                    max_s=hi,
                    ns_flops=fl,
                    tflops=fl / med / 1e12,
                )
            )
torch.set_float32_matmul_precision("medium")
res["newton_schulz"] = ns
print(f"NS done {time.time() - t0:.1f}s", flush=True)

# D. the whole Muon step (emerging-optimizers Muon.step) over many params: per-matrix cost kappa
from emerging_optimizers.orthogonalized_optimizers.muon import Muon  # noqa: E402

steps = []
for label, shape, count in (
    ("tiny_64x64", (64, 64), 512),
    ("tiny_128x128", (128, 128), 512),
    ("qwen3_expert_fc1", (1536, 2048), 128),
    ("qwen3_expert_fc2", (2048, 768), 128),
    ("kimi_expert_fc1", (4096, 7168), 12),
    ("kimi_expert_fc2", (7168, 2048), 12),
):
    ps = [torch.nn.Parameter(torch.randn(*shape, device=dev)) for _ in range(count)]
    for p in ps:
        p.grad = torch.randn_like(p)
    for prec in ("medium", "high"):
        opt = Muon(
            ps,
            lr=1e-3,
            momentum=0.95,
            weight_decay=0.01,
            nesterov=True,
            fp32_matmul_prec=prec,
            coefficient_type="quintic",
            num_ns_steps=5,
        )
        med, lo, hi = bench(opt.step, reps=5, warm=1)
        r, c = shape
        m_, n_ = min(r, c), max(r, c)
        fl = 5 * (4.0 * m_ * m_ * n_ + 2.0 * m_**3) * count
        steps.append(
            dict(
                case=label,
                rows=r,
                cols=c,
                params=count,
                fp32_matmul_prec=prec,
                median_s=med,
                min_s=lo,
                max_s=hi,
                per_param_s=med / count,
                ns_flops=fl,
                tflops=fl / med / 1e12,
            )
        )
    del ps, opt
    torch.cuda.empty_cache()
res["muon_step"] = steps
print(f"Muon step done {time.time() - t0:.1f}s", flush=True)

json.dump(res, open(os.path.join(OUT, "gpu_measurements.json"), "w"), indent=1)
for row in steps:
    print(row["case"], row["fp32_matmul_prec"], f"{row['per_param_s'] * 1e6:.1f} us/param", f"{row['tflops']:.1f} TF/s")
for row in ns:
    print(row["model"], row["rows"], row["cols"], row["fp32_matmul_prec"], f"{row['tflops']:.1f} TF/s")
print("nvidia-smi:", flush=True)
os.system("nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv")
sys.exit(0)
