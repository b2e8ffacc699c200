"""Validate bridgebench's time model (bridgebench.model.timing) against measurements nobody here made; prints figures.

(c) Rank correlation (Spearman, scipy) between predicted and published model TFLOP/s/GPU within each (model, system,
    precision) group of NVIDIA's perf tables with at least 4 scored rows, every row predicted by a calibration fitted
    on OTHER releases: leave-one-release-out (each release held out in turn) and early -> late (fit 25.09 .. 26.02.01,
    score 26.04 .. 26.08); physics only, and with the release-trend term (``calibrate(..., trend=True)``).
(d) The Muon / Adam iteration-time ratio of Megatron-LM's golden pairs (results/reference/golden, H100 and GB200):
    predicted as 1 + (Muon optimizer step - Adam optimizer step) / the measured Adam median, against the measured
    medians (INDEX.csv, steps 10 onward).
(e) The blog's Table 1 (GB300, MXFP8, 26.02): Muon's step-time increase over AdamW for Kimi K2 (+2.1 %) and Qwen3
    30B-A3B (+3.9 %), from the shipped calibration.

    PYTHONPATH=src .venv/bin/python benchmarks/validate_time.py [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from scipy.stats import spearmanr  # noqa: E402

from bridgebench.config import calibration  # noqa: E402
from bridgebench.config import sweep as engine  # noqa: E402
from bridgebench.config.catalog import load_gpu  # noqa: E402
from bridgebench.model.timing import GpuFacts, TimeConfig, calibrate, predict_time  # noqa: E402
from bridgebench.results.golden import golden_cases, golden_spec  # noqa: E402
from bridgebench.results.time_calibration import published_rows  # noqa: E402

EARLY = {"25.09", "25.11", "26.02", "26.02.01"}


def spearman(rows, trend: bool, mode: str) -> tuple[dict, tuple]:
    """Held-out predictions, then Spearman per group with >= 4 scored rows (and pooled over all held-out rows)."""
    releases = sorted({r.release for r in rows})
    if mode == "leave-one-release-out":
        splits = [(set(releases) - {rel}, {rel}) for rel in releases]
    else:
        splits = [(EARLY, set(releases) - EARLY)]
    pred = {}
    for train, test in splits:
        cal = calibrate([r for r in rows if r.release in train], trend=trend)
        for i, r in enumerate(rows):
            if r.release in test:
                pred[i] = predict_time(r.spec, r.cfg, cal).tflops_per_gpu
    groups = defaultdict(list)
    for i in pred:
        groups[(rows[i].model, rows[i].system, rows[i].precision)].append(i)
    out = {}
    for key, idx in sorted(groups.items()):
        if len(idx) < 4:
            continue
        p, y = [pred[i] for i in idx], [rows[i].tflops for i in idx]
        rho = spearmanr(p, y).statistic if len(set(p)) > 1 else float("nan")
        out[key] = (len(idx), rho, statistics.mean(abs(a / b - 1) for a, b in zip(p, y)))
    allp = sorted(pred)
    pooled = (
        len(allp),
        spearmanr([pred[i] for i in allp], [rows[i].tflops for i in allp]).statistic,
        statistics.mean(abs(pred[i] / rows[i].tflops - 1) for i in allp),
    )
    return out, pooled


def release_order_ceiling(rows) -> dict:
    """Spearman of the release order itself against the published TFLOP/s per group: what a model that knew nothing
    but "later releases are faster" would score -- the ceiling for a config-based model, since within a group the
    configuration rarely changes and the published figure moves with the software."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r.model, r.system, r.precision)].append(r)
    rhos = {
        k: spearmanr([r.cfg.release_index for r in v], [r.tflops for r in v]).statistic
        for k, v in groups.items()
        if len(v) >= 4
    }
    values = list(rhos.values())
    print(
        f"  release order alone (ceiling of any model that only knows the release): median rho "
        f"{statistics.median(values):.2f}, >= 0.8 in {sum(r >= 0.8 for r in values)}/{len(values)} groups"
    )
    return {
        "median_rho": statistics.median(values),
        "at_least_0.8": sum(r >= 0.8 for r in values),
        "groups": len(values),
    }


def part_c(rows) -> dict:
    print(f"(c) Spearman per (model, system, precision) group, >= 4 scored rows; {len(rows)} published rows")
    results = {"release_order_ceiling": release_order_ceiling(rows)}
    for mode in ("leave-one-release-out", "early->late"):
        for trend in (False, True):
            groups, pooled = spearman(rows, trend, mode)
            tag = f"{mode}, {'with release trend' if trend else 'physics only'}"
            print(f"\n  {tag}")
            print(f"  {'model':16s} {'system':10s} {'prec':6s} {'n':>3s} {'rho':>6s} {'MAPE':>6s}")
            rhos = []
            for (m, s, p), (n, rho, mape) in groups.items():
                print(f"  {m:16s} {s:10s} {p or '(none)':6s} {n:3d} {rho:6.2f} {100 * mape:5.1f}%")
                if rho == rho:
                    rhos.append(rho)
            if rhos:
                print(
                    f"  groups {len(groups)}, rho defined in {len(rhos)} (else all predictions tied); median rho "
                    f"{statistics.median(rhos):.2f}, >= 0.8 in {sum(r >= 0.8 for r in rhos)}/{len(rhos)}"
                )
            print(f"  pooled over {pooled[0]} held-out rows: rho {pooled[1]:.2f}, MAPE {100 * pooled[2]:.1f}%")
            results[tag] = {
                "groups": {"|".join(k): v for k, v in groups.items()},
                "pooled": pooled,
                "median_rho": statistics.median(rhos) if rhos else None,
            }
    return results


def part_d(cal) -> list[dict]:
    print("\n(d) golden Muon / Adam iteration-time ratio (Megatron-LM golden values, median from step 10)")
    print("    predicted = 1 + (predicted Muon optimizer step - predicted Adam optimizer step) / measured Adam median")
    cases = {(c.test_case, c.hardware): c for c in golden_cases()}
    out = []
    for c in golden_cases():
        if c.role != "muon" or c.gpu not in ("h100", "gb200") or c.iter_time_median_s is None:
            continue
        twin = cases.get((c.twin, c.hardware))
        if twin is None or twin.iter_time_median_s is None:
            continue
        spec = golden_spec(c.args)
        gpu = GpuFacts.from_mapping(load_gpu(c.gpu))
        distributed = bool(c.args.get("--use-distributed-optimizer"))
        kw = dict(
            gpu=gpu,
            peak_key="bf16",
            num_gpus=c.num_gpus,
            mbs=int(c.args["--micro-batch-size"]),
            gbs=int(c.args["--global-batch-size"]),
            ep=int(c.args["--expert-model-parallel-size"]),
        )
        muon = predict_time(spec, TimeConfig(**kw, optimizer="dist_muon" if distributed else "muon"), cal)
        adam = predict_time(spec, TimeConfig(**kw, optimizer="adam"), cal)
        measured = c.iter_time_median_s / twin.iter_time_median_s
        predicted = 1 + (muon.optimizer - adam.optimizer) / twin.iter_time_median_s
        note = "" if distributed else "  [non-distributed muon; also checks weight hashes every step]"
        print(
            f"  {c.short:30s} {c.hardware:12s} measured {c.iter_time_median_s:.3f}/{twin.iter_time_median_s:.3f} = "
            f"{measured:.2f}  predicted {predicted:.2f} ({100 * (predicted / measured - 1):+.0f}%){note}"
        )
        out.append({"case": c.short, "hw": c.hardware, "measured": measured, "predicted": predicted})
    return out


def part_e(cal) -> list[dict]:
    print("\n(e) blog Table 1 (GB300 MXFP8, 26.02): Muon step-time increase over AdamW, shipped calibration")
    out = []
    blog = {"kimi_k2": (1051, 1029), "qwen3_30b_a3b": (713, 686)}
    for run, (adam_tf, muon_tf) in blog.items():
        # each recipe at the release the blog ran (configs/table1_run: Kimi K2 26.02.01, Qwen3 26.02)
        base = engine.base_of([f"+table1_run={run}", "optimizer=muon"])
        v = engine.effective(base, {})
        cfg = engine.time_config(v, base.gpu)
        muon = predict_time(base.spec, cfg, cal)
        adam = predict_time(base.spec, dataclasses.replace(cfg, optimizer="adam"), cal)
        published_adam_s = adam.flops / cfg.num_gpus / (adam_tf * 1e12)
        published = adam_tf / muon_tf - 1
        delta = muon.total - adam.total
        print(
            f"  {base.spec.name:14s} predicted +{100 * (muon.total / adam.total - 1):.1f}% (delta {delta:.3f} s on a "
            f"predicted AdamW step of {adam.total:.2f} s; +{100 * delta / published_adam_s:.1f}% on the published "
            f"{published_adam_s:.2f} s)  published +{100 * published:.1f}% ({published_adam_s * published:.3f} s)"
        )
        print(
            f"  {'':14s} Muon terms: NS {muon.ns:.3f} s ({muon.busiest_ns_flops / 1e12:.0f} TFLOP on the busiest GPU), "
            f"{muon.busiest_matrices} matrices x {cal.kappa * 1e6:.0f} us = {muon.per_matrix:.3f} s, all-gather "
            f"{muon.allgather:.3f} s, element-wise {muon.elementwise:.3f} s; AdamW optimizer {adam.optimizer:.3f} s"
        )
        out.append(
            {
                "model": base.spec.name,
                "predicted_pct": 100 * (muon.total / adam.total - 1),
                "predicted_pct_on_published": 100 * delta / published_adam_s,
                "published_pct": 100 * published,
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    args = ap.parse_args()
    rows = published_rows()
    c = part_c(rows)
    cal = calibration.load().time
    d = part_d(cal)
    e = part_e(cal)
    if args.json:
        args.json.write_text(json.dumps({"spearman": c, "golden": d, "blog": e}, indent=1, default=str))


if __name__ == "__main__":
    main()
