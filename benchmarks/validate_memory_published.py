"""Does the memory model (and every rule before it) let through the configurations that ran? Prints figures.

(a) NVIDIA's published pretraining rows (results/reference/published_pretrain_throughput.csv) with a configs/model:
    each through the sweep pipeline as bridgebench.validation.published_points composes it; fits / false prunes (by
    rule) / rows whose printed configuration cannot have run as printed, and the predicted memory of every row.
(b) The ablation sets of configs/paths' ablations (../shared/reference/ablations beside the clone; BRIDGEBENCH_ABLATIONS
    moves it; every row ran), read by bridgebench.validation.ablations: each model written as a model YAML into a
    temporary $BRIDGEBENCH_CONFIG_DIR (the bring-your-own-model path), each row a point of the same pipeline on
    gpu=a100 / h100 (torchtitan's H100 96 GB HBM2e as a user GPU), with the framework's settings where the row does
    not state them (FRAMEWORK there); fits per set, and predicted vs measured peak memory where the source reports
    it (torchtitan, GiB).
(c) The allocator fragmentation behind the pruning margin (configs/calibration/default.yaml): reserved over
    allocated at the peak in every real log that prints both (bridgebench.logs.parser).

    PYTHONPATH=src .venv/bin/python benchmarks/validate_memory_published.py [--rows] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from bridgebench.validation import metrics  # noqa: E402
from bridgebench.validation.ablations import ablations  # noqa: E402

LOGS = REPO / "tests" / "data" / "logs"


def fragmentation() -> list[dict]:
    """Reserved over allocated at the peak (minus 1) per real log that prints both, the median over its ranks."""
    from bridgebench.logs.parser import parse_log

    out = []
    for name in (
        "mlm_i756_mixtral8x7b_h100_iter2_3_after_memline.log",
        "mbridge_dsv3_nvfp4_v2_mem_gb_rankprefix.log",
        "dgxc_llama31_8b_ckpt_resume_mem_gb.log",
        "mbridge_llama_7b_cp2_8rank_20iter_out1.log",
        "mlm_i60_gpt2_v100_2020_gaps5_memline.log",
    ):
        per_rank = parse_log(LOGS / name).memory.get("per_rank", {})
        ratios = [
            e["max_reserved_mb"] / e["max_allocated_mb"] - 1
            for e in per_rank.values()
            if e.get("max_reserved_mb") and e.get("max_allocated_mb")
        ]
        out.append({"log": name, "ranks": len(ratios), "fragmentation": statistics.median(ratios) if ratios else None})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every published row, not only the pruned ones")
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    args = ap.parse_args()

    from bridgebench.config import calibration
    from bridgebench.validation.published_points import published_points, summary

    calib = calibration.load()
    print(f"load average {open('/proc/loadavg').read().split()[:3]}")
    t0 = time.perf_counter()
    df = published_points(calib=calib)
    took = time.perf_counter() - t0
    s = summary(df)
    print(f"\n(a) published rows with a configs/model: {s['rows']} ({took:.1f} s)")
    print(f"    fit: {s['fits']}   false prunes: {s['false_prunes']} {s['false_prunes_by_rule']}   "
          f"printed configuration cannot have run as printed: {s['inconsistent']}")  # fmt: skip
    kinds = df["settings_source"].map(
        lambda x: "the release's bridgebench recipe" if x.startswith("recipes/")
        else "0.6.2 perf recipe + the release's own settings" if "own settings" in x
        else "0.6.2 perf recipe" if x.startswith("megatron-bridge") else "base recipe (no 0.6.2 perf recipe)"
    )  # fmt: skip
    print(f"    unprinted settings from: {kinds.value_counts().to_dict()}")
    for r in df[kinds == "base recipe (no 0.6.2 perf recipe)"].itertuples():
        print(f"      no perf recipe: {r.release} {r.model} {r.system} {r.precision}")
    replaced = df[df["printed_replaced"].notna()]
    print(f"    judged with their release launcher's sizes, not the printed ones (published_settings.yaml): "
          f"{s['printed_replaced']}")  # fmt: skip
    for r in replaced.itertuples():
        print(f"      {r.release} {r.model} {r.system} {r.precision}: {r.printed_replaced} -> "
              f"{r.mem_total_gb:.1f} GB of {r.hbm_gb:.1f} GB, {'fits' if r.fits else 'does not fit'}")  # fmt: skip
    shown = df if args.rows else df[~df["fits"]]
    for r in shown.itertuples():
        mem = "-" if r.mem_total_gb != r.mem_total_gb or r.mem_total_gb is None else f"{r.mem_total_gb:6.1f}"
        cap = "-" if r.hbm_gb != r.hbm_gb or r.hbm_gb is None else f"{r.hbm_gb:6.1f}"
        tag = "fits" if r.fits else ("INCONSISTENT" if r.inconsistent else f"PRUNED by {r.pruned_by}")
        print(f"    {r.release:9s} {r.model:16s} {r.system:6s} {r.precision:7s} {r.num_gpus:5d} GPUs TP{r.tp} PP{r.pp} "
              f"VP{r.vp or '-'} CP{r.cp} EP{r.ep} MBS{r.mbs}: {mem} GB of {cap} GB  {tag}"
              + ("" if r.fits else f"\n        {r.reason}"))  # fmt: skip
    if not args.rows:
        print("    (--rows prints every row's predicted memory)")

    abl = ablations(calib)
    print(f"\n(b) ablation rows (all ran): {len(abl)}")
    for set_id in sorted({a["set"] for a in abl}):
        mine = [a for a in abl if a["set"] == set_id]
        print(f"    {set_id:38s} fit {sum(a['fits'] for a in mine):2d} / {len(mine):2d}")
        for a in mine:
            if not a["fits"]:
                where = f"{a['model']} {a['num_gpus']} GPUs TP{a['tp']} PP{a['pp']}"
                print(f"        PRUNED {where}: {a['rule']}: {a['reason']}")
    measured = [a for a in abl if a["measured_gb"] and a["mem_total_gb"]]
    if measured:
        errs = metrics.rel_errors([a["mem_total_gb"] for a in measured], [a["measured_gb"] for a in measured])
        med = statistics.median(errs)
        print(f"    predicted (allocated) vs measured peak (torchtitan's max reserved, {len(measured)} rows): median "
              f"{med:+.1%}, min {min(errs):+.1%}, max {max(errs):+.1%} (framework=torchtitan: FSDP2, op-level SAC, "
              "upcast loss; torch.compile / Float8 / AsyncTP not modelled)")  # fmt: skip

    frag = fragmentation()
    print("\n(c) allocator fragmentation (max reserved / max allocated - 1), median over ranks:")
    for f in frag:
        val = "-" if f["fragmentation"] is None else f"{f['fragmentation']:+.1%}"
        print(f"    {f['log']:52s} {f['ranks']} rank(s) {val}")
    modern = [f["fragmentation"] for f in frag if f["fragmentation"] is not None and "2020" not in f["log"]]
    lo, med = min(modern), statistics.median(modern)
    print(f"    lowest {lo:.2%} (the pruning margin), median {med:.2%} (the 'tight' flag); calibration: "
          f"fragmentation {calib.fragmentation:g}, typical {calib.fragmentation_typical:g}")  # fmt: skip

    if args.json:
        args.json.write_text(json.dumps({
            "published": {"summary": s, "rows": json.loads(df.to_json(orient="records"))},
            "ablations": abl, "fragmentation": frag,
        }, indent=2, default=str))  # fmt: skip
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
