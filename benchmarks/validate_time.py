"""Validate bridgebench's time model (bridgebench.model.steptime) against measurements nobody here made; prints figures.

(b) Every published row held out by release (LORO) and by configuration (LOCO: the same sizes at every release held
    out together, bridgebench.model.steptime.fit.leave_out): MAPE, median |error|, MAPE by distance from the fold's
    training rows, and the coverage of the shipped conformal bands at 50 / 68 / 90 % (bridgebench.model.steptime.
    bands), with the calibration's own held-out coverage per distance.
(c) Every published row of NVIDIA's perf tables predicted by a calibration fitted on OTHER releases: leave one release
    out (each release held out in turn; a group's other releases lie on both sides of it, so its level is read off
    its neighbours) and early -> late (fit 25.09 .. 26.02.01, score 26.04 .. 26.08: the levels are carried forward).
    Models: physics only (efficiency per GPU and precision class, no release level), the shipped model (+ the release
    levels read off the table, bridgebench.model.steptime.release), and the release order alone (a reference, not a
    model: "later is faster"). Per (model, system, precision) group with >= 4 scored rows: Spearman (scipy); pooled
    Spearman and MAPE over all held-out rows; the consecutive configuration changes inside groups.
(d) The Muon / Adam iteration-time ratio of Megatron-LM's golden pairs (results/reference/golden, H100 and GB200):
    predicted as 1 + (Muon step - Adam step) / the measured Adam median, against the measured medians (INDEX.csv,
    steps 10 onward).
(e) The blog's Table 1 (GB300, MXFP8, 26.02): Muon's step-time increase over AdamW for Kimi K2 (+2.1 %) and Qwen3
    30B-A3B (+3.9 %), from the shipped calibration.
(f) The GPU measurement (results/reference/gpu, issue 22 item 6): Newton-Schulz time per shape fitted as NS FLOPs at
    a fraction of the BF16 peak plus a per-call cost; the Muon step's kernels per matrix x launch latency.

(g) The GEMM shape law against the GEMMs measured on an H100 (results/reference/gpu/h100_2026-11-27,
    bridgebench.validation.gemm_fit): each law's large-GEMM rate, per-call floor, fitted sizes and mean |log error|
    in sample, by two-fold CV over hidden sizes and on the dense / grouped / H200 shapes it was not fitted on.

    PYTHONPATH=src .venv/bin/python benchmarks/validate_time.py [--json out.json] [--skip-b] [--skip-c]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


from bridgebench import sweep as engine  # noqa: E402
from bridgebench.config import calibration  # noqa: E402
from bridgebench.config.catalog import load_gpu  # noqa: E402
from bridgebench.model.steptime.config import GpuFacts, TimeConfig  # noqa: E402
from bridgebench.model.steptime.fit import calibrate  # noqa: E402
from bridgebench.model.steptime.muon import adam_counterpart  # noqa: E402
from bridgebench.model.steptime.predict import predict_time  # noqa: E402
from bridgebench.model.steptime.release import release_index  # noqa: E402
from bridgebench.validation import metrics  # noqa: E402
from bridgebench.validation.gemm_fit import measured_gemm_rates  # noqa: E402
from bridgebench.validation.golden import golden_cases, golden_spec  # noqa: E402
from bridgebench.validation.time_calibration import published_rows  # noqa: E402

EARLY = {"25.09", "25.11", "26.02", "26.02.01"}
#: models compared in (c).
MODELS = ("physics only", "+ release levels (shipped)")


def splits_of(rows, mode: str) -> list[tuple[set, set]]:
    releases = sorted({r.release for r in rows})
    if mode == "leave-one-release-out":
        return [(set(releases) - {rel}, {rel}) for rel in releases]
    return [(EARLY, set(releases) - EARLY)]


def group_of(r) -> tuple[str, str, str]:
    return (r.model, r.system, r.precision)


def held_out(rows, mode: str) -> dict[str, dict[int, float]]:
    """Held-out predicted TFLOP/s/GPU of every scored row under each of :data:`MODELS`."""
    out: dict[str, dict[int, float]] = {name: {} for name in MODELS}
    for train, test in splits_of(rows, mode):
        shipped = calibrate([r for r in rows if r.release in train], measured_rates=measured_gemm_rates())
        physics = dataclasses.replace(shipped, groups={}, family_level={})
        for i, r in enumerate(rows):
            if r.release in test:
                out["physics only"][i] = predict_time(r.spec, r.cfg, physics).tflops_per_gpu
                out["+ release levels (shipped)"][i] = predict_time(r.spec, r.cfg, shipped).tflops_per_gpu
        print(f"  fitted without {', '.join(sorted(test))}", flush=True)
    return out


def scores(rows, pred: dict[int, float]) -> tuple[dict, tuple]:
    """Spearman and mean |error| per group with >= 4 scored rows, and pooled (rows, rho, MAPE) over all of them."""
    groups = defaultdict(list)
    for i in pred:
        groups[group_of(rows[i])].append(i)
    out = {}
    for key, idx in sorted(groups.items()):
        if len(idx) < 4:
            continue
        p, y = [pred[i] for i in idx], [rows[i].tflops for i in idx]
        out[key] = (len(idx), metrics.rank_correlation(p, y), metrics.mape(metrics.rel_errors(p, y)))
    idx = sorted(pred)
    p, y = [pred[i] for i in idx], [rows[i].tflops for i in idx]
    pooled = (len(idx), metrics.rank_correlation(p, y), metrics.mape(metrics.rel_errors(p, y)))
    return out, pooled


def summary(groups: dict) -> tuple[float | None, int, int]:
    rhos = [rho for _, rho, _ in groups.values() if rho == rho]
    return (statistics.median(rhos) if rhos else None, sum(r >= 0.8 for r in rhos), len(groups))


CONFIG_FIELDS = ("gbs", "mbs", "tp", "pp", "vp", "cp", "ep", "etp")


def config_changes(rows) -> dict:
    """Which configuration fields change inside the groups of >= 4 rows, and whether the physics (fitted on all rows,
    no group terms) moves each consecutive change the way the published figure moves."""
    cal = calibrate(rows, levels=False, measured_rates=measured_gemm_rates())
    groups = defaultdict(list)
    for r in rows:
        groups[group_of(r)].append(r)
    constant, agree, changes = 0, 0, []
    for key, members in sorted(groups.items()):
        if len(members) < 4:
            continue
        members.sort(key=lambda r: release_index(r.release))
        sig = lambda r: {f: getattr(r.cfg, f) for f in CONFIG_FIELDS} | {"mtp": r.spec.mtp_layers}  # noqa: E731
        constant += all(sig(r) == sig(members[0]) for r in members)
        for a, b in zip(members, members[1:]):
            if sig(a) == sig(b):
                continue
            ratio = metrics.pair_ratio(
                measured_a=a.tflops,
                measured_b=b.tflops,
                predicted_a=predict_time(a.spec, a.cfg, cal).tflops_per_gpu,
                predicted_b=predict_time(b.spec, b.cfg, cal).tflops_per_gpu,
            )
            agree += ratio.same_direction
            changed = {f: (sig(a)[f], sig(b)[f]) for f in sig(a) if sig(a)[f] != sig(b)[f]}
            changes.append((key, a.release, b.release, changed, ratio.predicted - 1, ratio.measured - 1))
    n = sum(len(v) >= 4 for v in groups.values())
    print(f"  configuration constant across releases in {constant}/{n} groups; consecutive config changes:")
    for (m, s, p), ra, rb, changed, dp, dy in changes:
        print(f"    {m:16s} {s:6s} {p:6s} {ra}->{rb}: {changed}  physics {100 * dp:+.1f}%  published {100 * dy:+.1f}%")
    print(f"  the physics moves {agree}/{len(changes)} of them the way the published figure moves")
    return {"constant_groups": constant, "groups": n, "changes": len(changes), "physics_agrees": agree}


def part_c(rows) -> dict:
    print(f"(c) Spearman per (model, system, precision) group, >= 4 scored rows; {len(rows)} published rows")
    results = {"config_changes": config_changes(rows)}
    for mode in ("leave-one-release-out", "early->late"):
        preds = held_out(rows, mode)
        scored = sorted(preds["physics only"])
        order = {i: release_index(rows[i].release) for i in scored}  # "later is faster", the release order alone
        table = {name: scores(rows, preds[name]) for name in MODELS}
        table["release order alone (ceiling of a monotone software trend)"] = scores(rows, order)
        print(f"\n  {mode}: rho per group ({', '.join(f'[{n}] {name}' for n, name in enumerate(table))})")
        keys = list(table["physics only"][0])
        print(
            f"  {'model':16s} {'system':7s} {'prec':6s} {'n':>2s} "
            + " ".join(f"{f'[{n}]':>5s}" for n in range(len(table)))
        )
        for key in keys:
            cells = " ".join(f"{t[0][key][1]:5.2f}" for t in table.values())
            print(f"  {key[0]:16s} {key[1]:7s} {key[2] or '(none)':6s} {table['physics only'][0][key][0]:2d} {cells}")
        print(f"  {'':4s}{'model':58s} {'median':>6s} {'>=0.8':>6s} {'pooled':>6s} {'MAPE':>6s}")
        results[mode] = {}
        for n, (name, (groups, pooled)) in enumerate(table.items()):
            med, hits, total = summary(groups)
            med_s = f"{med:6.2f}" if med is not None else "   nan"
            model = n < len(MODELS)  # the release order predicts no TFLOP/s: no pooled figures
            pooled_s = f"{pooled[1]:6.2f} {100 * pooled[2]:5.1f}%" if model else "     -      -"
            print(f"  [{n}] {name:58s} {med_s} {hits:3d}/{total:<2d} {pooled_s}")
            results[mode][name] = {
                "groups": {"|".join(k): v for k, v in groups.items()},
                "median_rho": med,
                "at_least_0.8": hits,
                "n_groups": total,
                "pooled_rows": pooled[0],
                "pooled_rho": pooled[1] if model else None,
                "pooled_mape": pooled[2] if model else None,
            }
        print(f"  pooled over {len(scored)} held-out rows")
    return results


def part_d(cal) -> list[dict]:
    print("\n(d) golden Muon / Adam iteration-time ratio (Megatron-LM golden values, median from step 10)")
    print("    predicted = 1 + (predicted Muon step - predicted Adam step) / measured Adam median")
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
        muon_opt = "dist_muon" if distributed else "muon"
        muon = predict_time(spec, TimeConfig.from_flat(**kw, optimizer=muon_opt, use_distributed_optimizer=False), cal)
        adam = predict_time(
            spec, TimeConfig.from_flat(**kw, optimizer="adam", use_distributed_optimizer=distributed), cal
        )
        ratio = metrics.pair_ratio(
            measured_a=twin.iter_time_median_s,
            measured_b=c.iter_time_median_s,
            predicted_a=adam.total,
            predicted_b=muon.total,
            anchored=True,
        )
        measured, predicted = ratio.measured, ratio.predicted
        note = "" if distributed else "  [non-distributed muon; also checks weight hashes every step]"
        print(
            f"  {c.short:30s} {c.hardware:12s} measured {c.iter_time_median_s:.3f}/{twin.iter_time_median_s:.3f} = "
            f"{measured:.2f}  predicted {predicted:.2f} ({100 * ratio.error:+.0f}%){note}"
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
        adam = predict_time(base.spec, adam_counterpart(cfg), cal)
        published_adam_s = adam.flops / cfg.num_gpus / (adam_tf * 1e12)
        published = adam_tf / muon_tf - 1
        delta = muon.total - adam.total
        mo = muon.opt  # the Muon step's optimizer terms (s)
        print(
            f"  {base.spec.name:14s} predicted +{100 * (muon.total / adam.total - 1):.1f}% (delta {delta:.3f} s on a "
            f"predicted AdamW step of {adam.total:.2f} s; +{100 * delta / published_adam_s:.1f}% on the published "
            f"{published_adam_s:.2f} s)  published +{100 * published:.1f}% ({published_adam_s * published:.3f} s)"
        )
        print(
            f"  {'':14s} Muon terms: NS {mo.ns:.3f} s ({mo.busiest_ns_flops / 1e12:.0f} TFLOP on the busiest GPU), "
            f"{mo.busiest_matrices} matrices x {cal.kappa * 1e6:.0f} us = {mo.per_matrix:.3f} s, all-gather "
            f"{mo.allgather:.3f} s, element-wise {mo.elementwise:.3f} s, DP {muon.terms['dp_comm']:.3f} s; AdamW "
            f"optimizer {adam.terms['optimizer']:.3f} s, DP {adam.terms['dp_comm']:.3f} s (release {muon.release})"
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


def part_b(rows, cal) -> dict:
    """Leave one release out and leave one configuration out (every release of a configuration held out together):
    MAPE, median |error|, MAPE by distance from the fold's training rows, and the coverage of the shipped conformal
    band of each held-out row's distance at 50 / 68 / 90 %."""
    import math

    from bridgebench.model.steptime.bands import LEVELS
    from bridgebench.model.steptime.config import config_key
    from bridgebench.model.steptime.fit import leave_out

    print("(b) held out by release (LORO) and by configuration (LOCO); bands: the shipped conformal calibration")
    out = {}
    keys = {
        "leave one release out": lambda r: r.release,
        "leave one configuration out": lambda r: config_key(r.spec, r.cfg),
    }
    fixed = dict(
        c_grid=(cal.c_layer,),
        host_grid=(cal.host_moe,),
        expert_grid=(cal.host_moe_expert,),
        kappa=cal.kappa,
        ns_efficiency=cal.ns_efficiency,
        measured_rates=cal.measured_rates,
    )
    for name, key in keys.items():
        pred, tiers, _ = leave_out(rows, key, lambda rs: calibrate(rs, **fixed))
        errs = [(p / r.tflops - 1, t) for r, p, t in zip(rows, pred, tiers) if p]
        mape = statistics.mean(abs(e) for e, _ in errs)
        med = statistics.median(abs(e) for e, _ in errs)
        cov = {}
        if cal.conformal is not None:
            cov = {
                lv: statistics.mean(abs(math.log1p(e)) <= math.log1p(cal.conformal.half_width(t, lv)) for e, t in errs)
                for lv in LEVELS
            }
        by: dict[str, list[float]] = defaultdict(list)
        for e, t in errs:
            by[", ".join(t)].append(abs(e))
        big = sum(abs(e) > 0.25 for e, _ in errs)
        print(f"  {name}: MAPE {100 * mape:.1f}%, median |error| {100 * med:.1f}% over {len(errs)} rows ({big} off by "
              "more than 25 %); coverage "
              + ", ".join(f"{100 * v:.0f}% in the {lv} % band" for lv, v in cov.items()))  # fmt: skip
        for d, v in sorted(by.items()):
            print(f"    {d:24s} {len(v):3d} rows  MAPE {100 * statistics.mean(v):5.1f}%")
        out[name] = {"mape": mape, "median": med, "coverage": cov, "rows": len(errs), "over_25_pct": big,
                     "mape_by_distance": {d: statistics.mean(v) for d, v in by.items()}}  # fmt: skip
    if cal.conformal is not None:
        print("  conformal half-widths by distance (held-out coverage, each error against the other folds' quantile):")
        for tier, q in cal.conformal.quantiles.items():
            c = cal.conformal.coverage.get(tier, {})
            print(f"    {tier:20s} n={cal.conformal.counts.get(tier, 0):3d} "
                  + " ".join(f"{lv}%: +-{100 * math.expm1(q[lv]):5.1f}% ({100 * c.get(lv, float('nan')):.0f}%)"
                             for lv in LEVELS))  # fmt: skip
    return out


def part_f() -> dict:
    """The GPU measurement shipped in results/reference/gpu (issue 22 item 6): Newton-Schulz cost fitted on it."""
    from bridgebench.validation.muon_fit import gpu_ns_fit

    fit = gpu_ns_fit()
    print(f"\n(f) Newton-Schulz measured on {fit.gpu} (torch {fit.torch}; results/reference/gpu): fitted ns_efficiency "
          f"{fit.ns_efficiency:.3f} of the BF16 peak + {1e6 * fit.call_s:.0f} us per NS call; count-weighted NS rate "
          + ", ".join(f"{m} {v:.3f}" for m, v in fit.weighted.items())
          + f" of the peak; Muon step: {fit.kernels_per_param:.0f} kernels per matrix x {1e6 * fit.launch_s:.1f} us "
          f"launch = kappa {1e6 * fit.kappa_s:.0f} us on that VM")  # fmt: skip
    for name, measured, predicted in fit.residuals:
        print(f"    {name:26s} measured {1e3 * measured:8.3f} ms  fitted {1e3 * predicted:8.3f} ms "
              f"({100 * (predicted / measured - 1):+.0f}%)")  # fmt: skip
    return {"ns_efficiency": fit.ns_efficiency, "call_s": fit.call_s, "kappa_s": fit.kappa_s, "weighted": fit.weighted}


def part_g() -> list[dict]:
    """The GEMM shape law on the H100 GEMM measurements (issue 22 item 6)."""
    from bridgebench.validation.gemm_fit import gemm_law_fits

    fits = gemm_law_fits()
    print("\n(g) GEMM shape law on H100 GEMMs (results/reference/gpu/h100_2026-11-27; time = t0 + FLOPs / (R x "
          "shape)); mean |log error| in sample / 2-fold CV over hidden sizes / held out")  # fmt: skip
    for f in fits:
        held = ", ".join(f"{k} {v:.3f}" for k, v in f.held_out.items())
        print(f"    {f.precision:4s} {f.law:30s} R {f.rate:.3f} of peak, t0 {1e6 * f.t0_s:4.1f} us, sizes "
              f"{[round(h) for h in f.halves]}: {f.in_sample:.3f} / {f.cross_validated:.3f}"
              + (f"; {held}" if held else ""))  # fmt: skip
    return [dataclasses.asdict(f) for f in fits]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    ap.add_argument("--skip-b", action="store_true", help="skip (b) (76 held-out fits: a few minutes)")
    ap.add_argument("--skip-c", action="store_true", help="skip (c) (the held-out fits take a few minutes)")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    rows = published_rows()
    cal = calibration.load().time
    b = {} if args.skip_b else part_b(rows, cal)
    c = {} if args.skip_c else part_c(rows)
    d = part_d(cal)
    e = part_e(cal)
    f = part_f()
    g = part_g()
    if args.json:
        args.json.write_text(
            json.dumps(
                {"held_out": b, "spearman": c, "golden": d, "blog": e, "gpu": f, "gemm_law": g}, indent=1, default=str
            )  # fmt: skip
        )


if __name__ == "__main__":
    main()
