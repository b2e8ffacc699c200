"""Does the memory model (and every rule before it) let through the configurations that ran? Prints figures.

(a) NVIDIA's published pretraining rows (results/reference/published_pretrain_throughput.csv) with a configs/model:
    each through the sweep pipeline as bridgebench.results.published_points composes it; fits / false prunes (by
    rule) / rows whose printed configuration cannot have run as printed, and the predicted memory of every row.
(b) The ablation sets of ../shared/reference/ablations (every row ran): each model written as a model YAML into a
    temporary $BRIDGEBENCH_CONFIG_DIR (the bring-your-own-model path), each row a point of the same pipeline on
    gpu=a100 / h100 (torchtitan's H100 96 GB HBM2e as a user GPU), with the framework's settings where the row does
    not state them (listed per set in FRAMEWORK below); fits per set, and predicted vs measured peak memory where the
    source reports it (torchtitan, GiB).
(c) The allocator fragmentation behind the pruning margin (configs/calibration/default.yaml): reserved over
    allocated at the peak in every real log that prints both (bridgebench.logs.parser).

    PYTHONPATH=src .venv/bin/python benchmarks/validate_memory_published.py [--rows] [--json out.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import yaml  # noqa: E402

ABLATIONS = Path(os.environ.get("BRIDGEBENCH_ABLATIONS", REPO.parent.parent / "shared" / "reference" / "ablations"))
if not ABLATIONS.is_dir():  # a worktree under /work/wt/<branch> or the main checkout under /work/main
    ABLATIONS = Path("/work/shared/reference/ablations")
LOGS = REPO / "tests" / "data" / "logs"
GIB = 2**30

#: what each ablation set's framework did where a row does not say (the pipeline needs a value for each):
#: optimizer sharding, sequence parallelism, recompute, gradient precision; ``None`` = take the row's column.
FRAMEWORK = {
    # Megatron-LM 2021 (arXiv 2104.04473): no distributed optimizer yet (the 18 B/param of its Sec. 3.3 memory
    # footprint), every FLOP/s figure with activation recomputation (the set's README caveat), no SP (2022)
    "narayanan2021_t1_weak_scaling": dict(distopt=False, sp=False, recompute="full"),
    "narayanan2021_t2_ptdp_vs_zero3": dict(distopt=False, sp=False, recompute="full"),
    # Megatron-LM 2022 (arXiv 2205.05198): recompute and SP as each row states; no distributed optimizer
    "korthikanti2022_t4_22b_per_layer": dict(distopt=False, sp=None, recompute=None),
    "korthikanti2022_t5_e2e_iteration": dict(distopt=False, sp=None, recompute=None),
    # NeMo 24.12 recipes (dgxc-benchmarking v25.03): distributed optimizer, SP with TP, no recompute stated
    "dgxc_v2503_gpt3_175b_h100": dict(distopt=True, sp=True, recompute=None),
    "dgxc_v2503_llama31_70b_h100": dict(distopt=True, sp=True, recompute=None),
    "dgxc_v2503_llama31_405b_h100_proxy": dict(distopt=True, sp=True, recompute=None),
    "dgxc_v2503_grok1_314b_h100_moe": dict(distopt=True, sp=True, recompute=None),
    # Megatron-LM dev MoE recipes: distributed optimizer, SP with TP, ETP 1
    "mlm_dev_moe_recipes_qwen3": dict(distopt=True, sp=True, recompute=None),
    # torchtitan FSDP2 (fully sharded), op-level selective AC where a row says "selective": the memory model's
    # framework="torchtitan" (torchtitan@9dec370's parallelize_llama.py and train.py, see bridgebench.model.memory)
    "torchtitan_llama31_h100_202412": dict(distopt=True, sp=True, recompute=None, fsdp=True, framework="torchtitan"),
}
#: the ZeRO-3 rows (distributed_optimizer "zero3") ran DeepSpeed's ZeRO-3 (arXiv 2104.04473 Sec. 5.2): the memory
#: model's framework="deepspeed" (per-tensor gathering under DeepSpeed's default live-parameter cap)
ZERO3_FRAMEWORK = "deepspeed"


def _int(text: str) -> int | None:
    text = (text or "").strip()
    return int(float(text)) if text and text[0].isdigit() else None


def _precision(text: str) -> str:
    t = text.lower()
    if "mxfp8" in t:
        return "mxfp8"
    if "fp8" in t or "float8" in t:
        return "fp8_cs"  # per-tensor / blockwise FP8: one byte per value either way
    return "bf16"  # bf16, "mixed precision" (fp16 / bf16: the same bytes)


def _gpu(text: str) -> str:
    t = text.lower()
    if "96gb" in t.replace(" ", ""):
        return "h100_96gb"
    for name in ("a100", "gb200", "b200", "h100"):
        if name in t:
            return name
    raise ValueError(f"unknown ablation GPU {text!r}")


def _model_yaml(row: dict) -> tuple[str, dict]:
    """A model YAML (configs/model schema) for one ablation row's architecture."""
    layers, h = _int(row["num_layers"]), _int(row["hidden_size"])
    name = "abl_" + "".join(c if c.isalnum() else "_" for c in row["model"].lower()).strip("_") + f"_l{layers}"
    heads = _int(row["num_attention_heads"])
    data = {
        "name": name,
        "display_name": f"{row['model']} ({layers} layers, ablation row)",
        "num_layers": layers,
        "hidden_size": h,
        "ffn_hidden_size": _int(row["ffn_hidden_size"]) or _int(row["moe_ffn_hidden_size"]) or 4 * h,
        "num_attention_heads": heads,
        "num_query_groups": _int(row["num_query_groups"]) or heads,
        "vocab_size": _int(row["vocab_size"]) or 51200,
        "seq_length": _int(row["seq_length"]) or 8192,
    }
    gpt = "gpt" in row["model"].lower() or "nlg" in row["model"].lower() or "grok" in row["model"].lower()
    data["gated_linear_unit"] = not gpt  # GPT-3 / MT-NLG: GELU MLP; Llama / Qwen: SwiGLU
    data["activation_func"] = "gelu" if gpt else "silu"
    if _int(row["num_experts"]):
        data |= {
            "num_moe_experts": _int(row["num_experts"]),
            "moe_router_topk": _int(row["moe_router_topk"]) or 2,
            "moe_ffn_hidden_size": _int(row["moe_ffn_hidden_size"]) or data["ffn_hidden_size"],
        }
        if "grok" in row["model"].lower():
            data["gated_linear_unit"] = True  # Grok-1's experts are gated (public config: GeGLU-style w1/w3)
    return name, data


def _ablation_point(set_id: str, row: dict) -> tuple[list[str], dict]:
    """(base overrides, point values) of one ablation row."""
    fw = FRAMEWORK[set_id]
    tp, pp, cp, ep = (_int(row[k]) or 1 for k in ("tp", "pp", "cp", "ep"))
    vp = _int(row["vp"])
    num_gpus = _int(row["num_gpus"])
    dp = num_gpus // (tp * pp * cp)
    mbs = _int(row["mbs"]) or 1
    gbs = _int(row["gbs"]) or mbs * dp
    gbs = max(gbs, mbs * dp)
    if fw.get("framework") == "torchtitan" and pp > 1 and not _int(row["mbs"]):
        # torchtitan@9dec370 config_manager.py: pipeline_parallel_microbatches defaults to the PP degree -- the
        # local batch (GBS / DP) is split into PP microbatches
        mbs = max(1, gbs // dp // pp)
    rec = (row["recompute"] or "").lower() if fw["recompute"] is None else fw["recompute"]
    granularity = "full" if rec.startswith("full") else "selective" if rec.startswith("selective") else None
    sp = (row["sequence_parallel"] or "").lower().startswith("true") if fw["sp"] is None else fw["sp"]
    deepspeed = "zero3" in (row["distributed_optimizer"] or "").lower()
    zero3 = deepspeed or fw.get("fsdp", False)
    delta = {
        "num_gpus": num_gpus,
        "train.global_batch_size": gbs,
        "train.micro_batch_size": mbs,
        "model.tensor_model_parallel_size": tp,
        "model.pipeline_model_parallel_size": pp,
        "model.virtual_pipeline_model_parallel_size": vp if vp and pp > 1 else None,
        "model.context_parallel_size": cp,
        "model.expert_model_parallel_size": ep,
        "model.sequence_parallel": bool(sp and tp > 1),
        "model.pipeline_model_parallel_layout": "auto",
        "model.recompute_granularity": granularity,
        "model.recompute_method": "uniform" if granularity == "full" else None,
        "model.recompute_num_layers": 1 if granularity == "full" else None,
        "optimizer.use_distributed_optimizer": bool(fw["distopt"]),
        "ddp.use_distributed_optimizer": bool(fw["distopt"]),
        "ddp.use_megatron_fsdp": bool(zero3),
        "ddp.data_parallel_sharding_strategy": "optim_grads_params" if zero3 else "no_shard",
        "model.seq_length": _int(row["seq_length"]) or 8192,  # torchtitan's tables without one: its default, 8192
        "framework.name": ZERO3_FRAMEWORK if deepspeed else fw.get("framework", "megatron"),
    }
    if ep > 1:
        delta["model.expert_tensor_parallel_size"] = 1
    name, _ = _model_yaml(row)
    return [f"model={name}", f"gpu={_gpu(row['gpu'])}", f"precision={_precision(row['precision'])}"], delta


def ablations(calib, only: tuple[str, ...] | None = None) -> list[dict]:
    """Every ablation row through the pipeline (see the module docstring); ``only``: these sets (file stems)."""
    from bridgebench import sweep as engine

    sets = sorted(p for p in ABLATIONS.glob("*.csv") if only is None or p.stem in only)
    rows = [(p.stem, r) for p in sets for r in csv.DictReader(p.open())]
    with tempfile.TemporaryDirectory(prefix="bb-ablation-configs-") as tmp:
        (Path(tmp) / "model").mkdir()
        (Path(tmp) / "gpu").mkdir()
        for _, r in rows:
            name, data = _model_yaml(r)
            (Path(tmp) / "model" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        h100 = yaml.safe_load((REPO / "configs" / "gpu" / "h100.yaml").read_text())
        h100 |= {
            "name": "h100_96gb", "display_name": "H100 SXM 96GB HBM2e (torchtitan's Grand Teton hosts)",
            "published_system": None, "hbm_gb": 96, "hbm_total_mib": None,
            "memory_source": "torchtitan benchmarks/llama3_h100_202412_torchtitan.md: H100 96 GB HBM2e, 500 W",
        }  # fmt: skip
        (Path(tmp) / "gpu" / "h100_96gb.yaml").write_text(yaml.safe_dump(h100, sort_keys=False))
        old = os.environ.get("BRIDGEBENCH_CONFIG_DIR")
        os.environ["BRIDGEBENCH_CONFIG_DIR"] = tmp
        try:
            bases: dict[tuple, engine.Base] = {}
            pairs = []
            for set_id, r in rows:
                ov, delta = _ablation_point(set_id, r)
                if tuple(ov) not in bases:
                    bases[tuple(ov)] = engine.base_of(ov)
                    bases[tuple(ov)].index = len(bases) - 1
                pairs.append((bases[tuple(ov)], delta))
            out = engine.run_pipeline(list(bases.values()), calib, pairs=pairs, total=len(pairs))
        finally:
            if old is None:
                os.environ.pop("BRIDGEBENCH_CONFIG_DIR", None)
            else:
                os.environ["BRIDGEBENCH_CONFIG_DIR"] = old
    first = {r["point_id"]: r for r in out if r["status"] != "duplicate"}
    result = []
    for (set_id, r), row in zip(rows, out):
        row = first[row["point_id"]] if row["status"] == "duplicate" else row
        measured = float(r["memory_gb"]) * GIB / 1e9 if (r.get("memory_gb") or "").strip() else None
        result.append({
            "set": set_id, "model": r["model"], "gpu": row["gpu"], "num_gpus": row["num_gpus"], "tp": row["tp"],
            "pp": row["pp"], "cp": row["cp"], "ep": row["ep"], "mbs": row["mbs"], "status": row["status"],
            "rule": row.get("rule"), "reason": row.get("reason"), "mem_total_gb": row.get("mem_total_gb"),
            "hbm_gb": row.get("hbm_gb"), "measured_gb": measured,
            "fits": row["status"] in ("ranked", "fits", "indistinct"),
        })  # fmt: skip
    return result


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
    from bridgebench.results.published_points import published_points, summary

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
        errs = [a["mem_total_gb"] / a["measured_gb"] - 1 for a in measured]
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
