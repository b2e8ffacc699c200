"""Print how alternative Newton-Schulz counting variants compare with bridgebench's count on the Table 1 Muon runs.

    .venv/bin/python benchmarks/ns_accounting_variants.py

Variants (per replica, every Muon matrix once, GEMM kernels, 5 steps): bridgebench's (emerging-optimizers transposes so
the Gram matrix is on the smaller side: ``4 m^2 n + 2 m^3``, m = min), "no transpose" (Gram on the stored rows),
"larger side squared" (m = max), and "NS duplicated over the expert-parallel group" (each EP rank orthogonalizes
every expert), the last as TFLOP/s/GPU at the blog's Muon step time.
"""

from __future__ import annotations

from bridgebench.config.compose import compose, run_facts
from bridgebench.config.run_flops import parallelism, step_flops
from bridgebench.model.newton_schulz import muon_matrices, ns_flops
from bridgebench.results.records import load_blog_table1


def main() -> None:
    blog = load_blog_table1().set_index(["model", "optimizer"])
    for run in ("kimi_k2", "qwen3_30b_a3b"):  # each recipe at the release the blog ran (configs/table1_run)
        f = run_facts(compose([f"+table1_run={run}", "optimizer=muon"]))
        pub = blog.loc[(f.model.name, "muon")]
        step = float(step_flops(f).total) / (pub["published_model_tflops_per_gpu"] * 1e12 * f.num_gpus)
        mats = muon_matrices(f.model, split_qkv=True)
        ours = sum(ns_flops(m.rows, m.cols) for m in mats)
        no_t = sum(5 * (4 * m.rows**2 * m.cols + 2 * m.rows**3) for m in mats)
        big = sum(5 * (4 * max(m.rows, m.cols) ** 2 * min(m.rows, m.cols) + 2 * max(m.rows, m.cols) ** 3) for m in mats)
        experts = sum(ns_flops(m.rows, m.cols) for m in mats if m.is_expert)
        ep = parallelism(f).ep
        ep_dup = (experts * ep + ours - experts) / f.num_gpus / step / 1e12
        implied = pub["published_newton_schulz_tflops_per_gpu"] * 1e12 * f.num_gpus * step
        print(
            f"{f.model.name:14s} blog step {step:.2f} s | blog-implied NS {implied:.3e} FLOPs/step, ours per replica "
            f"{ours:.3e} (blog x{implied / ours:.2f}) | no transpose x{no_t / ours:.2f} | larger side squared "
            f"x{big / ours:.2f} | NS duplicated over EP={ep}: {ep_dup:.0f} TFLOP/s/GPU (blog "
            f"{pub['published_newton_schulz_tflops_per_gpu']:.0f})"
        )


if __name__ == "__main__":
    main()
