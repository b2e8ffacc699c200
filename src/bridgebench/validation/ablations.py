"""The published ablation sets (``configs/paths`` ``ablations``: ``../shared/reference/ablations`` beside the clone,
``BRIDGEBENCH_ABLATIONS`` moves it): one model measured under several parallel configurations by people who are not
us, read as sweep points for the memory model and the validity rules.

Each row's architecture becomes a model YAML (the ``configs/model`` schema) in a temporary
``$BRIDGEBENCH_CONFIG_DIR`` (the bring-your-own-model path) and each row a point of the sweep pipeline on
``gpu=a100`` / ``h100`` (torchtitan's H100 96 GB HBM2e as a user GPU), with its framework's settings where the row
does not state them (:data:`FRAMEWORK`). ``benchmarks/validate_memory_published.py`` and
``benchmarks/validate_ablations.py`` print the figures; :mod:`bridgebench.validation.ablation_time` reads the same rows
for the time model.
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bridgebench.config.calibration import ModelCalibration
from bridgebench.model.parallel import ParallelDims
from bridgebench.paths import CONFIG_DIR, USER_CONFIG_ENV, environ_set
from bridgebench.validation.data import require


def set_files(only: tuple[str, ...] | None = None) -> list[Path]:
    """The ablation sets' CSV files, sorted by name (``only``: these file stems, each required).

    Raises:
        bridgebench.validation.data.ReferenceDataMissing: the folder, or a file of ``only``, is absent.
    """
    folder = require("ablations", *(f"{s}.csv" for s in only or ()))
    return sorted(p for p in folder.glob("*.csv") if only is None or p.stem in only)


def read_set(path: Path) -> list[dict[str, str]]:
    """The rows of one ablation set (CSV header names as keys, cells as text)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


GIB = 2**30

#: what each ablation set's framework did where a row does not say (the pipeline needs a value for each):
#: optimizer sharding, sequence parallelism, recompute, gradient precision; ``None`` = take the row's column.
FRAMEWORK: dict[str, dict[str, Any]] = {
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


def _need(row: dict[str, str], column: str) -> int:
    """A cell every ablation row states (a whole number).

    Raises:
        ValueError: the cell is empty or not a number (names the column and the row's model).
    """
    value = _int(row[column])
    if value is None:
        raise ValueError(f"ablation row {row.get('model')!r}: {column} {row[column]!r} is not a whole number")
    return value


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


def model_yaml(row: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """A model YAML (configs/model schema) for one ablation row's architecture."""
    layers, h = _need(row, "num_layers"), _need(row, "hidden_size")
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


def ablation_point(set_id: str, row: dict[str, str], printed: bool = False) -> tuple[list[str], dict[str, Any]]:
    """(base overrides, point values) of one ablation row: what ran (sequence parallelism where Megatron-Core needs
    it for MoE with TP > 1, ``pipeline_model_parallel_layout=auto``), or with ``printed`` the row typed as printed --
    sequence parallelism only where the row or its framework states it, no layout -- which ``predict`` must refuse
    with the override that fixes it, or run (``tests/validation/test_ablations_as_printed.py``)."""
    fw = FRAMEWORK[set_id]
    tp, pp, cp, ep = (_int(row[k]) or 1 for k in ("tp", "pp", "cp", "ep"))
    vp = _int(row["vp"])
    num_gpus = _need(row, "num_gpus")
    dp = ParallelDims(num_gpus=num_gpus, tp=tp, pp=pp, cp=cp).dp
    mbs = _int(row["mbs"]) or 1
    gbs = _int(row["gbs"]) or mbs * dp
    gbs = max(gbs, mbs * dp)
    if fw.get("framework") == "torchtitan" and pp > 1 and not _int(row["mbs"]):
        # torchtitan@9dec370 config_manager.py: pipeline_parallel_microbatches defaults to the PP degree -- the
        # local batch (GBS / DP) is split into PP microbatches
        mbs = max(1, gbs // dp // pp)
    rec = (row["recompute"] or "").lower() if fw["recompute"] is None else fw["recompute"]
    granularity = "full" if rec.startswith("full") else "selective" if rec.startswith("selective") else None
    stated = (row["sequence_parallel"] or "").lower().startswith("true")
    sp = stated if fw["sp"] is None or printed else fw["sp"]
    if fw["sp"] is None and tp > 1 and _int(row["num_experts"]) and not printed:
        sp = True  # what ran: Megatron-Core's MoELayer refuses MoE with TP > 1 without SP (rule moe_tp_needs_sp)
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
    if printed:
        del delta["model.pipeline_model_parallel_layout"]
    name, _ = model_yaml(row)
    return [f"model={name}", f"gpu={_gpu(row['gpu'])}", f"precision={_precision(row['precision'])}"], delta


def ablations(
    calib: ModelCalibration,
    only: tuple[str, ...] | None = None,
    printed: bool = False,
    changes: dict[int, dict[str, Any]] | None = None,
    keep: set[int] | None = None,
) -> list[dict[str, Any]]:
    """Every ablation row through the sweep pipeline (see the module docstring): per row ``set``, ``model``, ``gpu``,
    ``num_gpus``, ``tp``, ``pp``, ``cp``, ``ep``, ``mbs``, ``status``, ``rule`` (the first broken), ``rules`` (every
    one, comma-separated), ``reason``, ``mem_total_gb`` (the
    busiest GPU, GB = 1e9 B), ``hbm_gb``, ``measured_gb`` (the source's peak, GiB converted to GB; None where it
    reports none) and ``fits``. ``only``: these sets (file stems); ``printed``: each row typed as printed
    (:func:`ablation_point`); ``changes``: row index (in the order of every row of the sets) -> point values
    replacing the row's (e.g. the overrides a refusal names); ``keep``: only these row indices (each result then
    carries its ``index``).

    Raises:
        bridgebench.validation.data.ReferenceDataMissing: the ablations folder, or a set of ``only``, is absent.
    """
    from bridgebench import sweep as engine

    rows = [(i, p.stem, r) for i, (p, r) in enumerate((p, r) for p in set_files(only) for r in read_set(p))]
    rows = [(i, s, r) for i, s, r in rows if keep is None or i in keep]
    with tempfile.TemporaryDirectory(prefix="bb-ablation-configs-") as tmp:
        (Path(tmp) / "model").mkdir()
        (Path(tmp) / "gpu").mkdir()
        for _, _, r in rows:
            name, data = model_yaml(r)
            (Path(tmp) / "model" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        h100 = yaml.safe_load((CONFIG_DIR / "gpu" / "h100.yaml").read_text())
        h100 |= {
            "name": "h100_96gb", "display_name": "H100 SXM 96GB HBM2e (torchtitan's Grand Teton hosts)",
            "published_system": None, "hbm_gb": 96, "hbm_total_mib": None,
            "memory_source": "torchtitan benchmarks/llama3_h100_202412_torchtitan.md: H100 96 GB HBM2e, 500 W",
        }  # fmt: skip
        (Path(tmp) / "gpu" / "h100_96gb.yaml").write_text(yaml.safe_dump(h100, sort_keys=False))
        with environ_set(USER_CONFIG_ENV, tmp):
            bases: dict[tuple[str, ...], engine.Base] = {}
            pairs = []
            for i, set_id, r in rows:
                ov, delta = ablation_point(set_id, r, printed)
                delta |= (changes or {}).get(i, {})
                if tuple(ov) not in bases:
                    bases[tuple(ov)] = engine.base_of(ov)
                    bases[tuple(ov)].index = len(bases) - 1
                pairs.append((bases[tuple(ov)], delta))
            out = engine.run_pipeline(list(bases.values()), calib, pairs=pairs, total=len(pairs))
    first = {r["point_id"]: r for r in out if r["status"] != "duplicate"}
    result = []
    for (index, set_id, r), row in zip(rows, out):
        row = first[row["point_id"]] if row["status"] == "duplicate" else row
        measured = float(r["memory_gb"]) * GIB / 1e9 if (r.get("memory_gb") or "").strip() else None
        result.append({
            "index": index, "set": set_id, "model": r["model"], "gpu": row["gpu"], "num_gpus": row["num_gpus"],
            "tp": row["tp"], "pp": row["pp"], "cp": row["cp"], "ep": row["ep"], "mbs": row["mbs"],
            "status": row["status"], "rule": row.get("rule"), "rules": row.get("rules") or row.get("rule"),
            "reason": row.get("reason"),
            "mem_total_gb": row.get("mem_total_gb"), "hbm_gb": row.get("hbm_gb"), "measured_gb": measured,
            "fits": row["status"] in ("ranked", "fits", "indistinct"),
        })  # fmt: skip
    return result
