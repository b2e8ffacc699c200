"""The published ablation rows (:mod:`bridgebench.validation.ablations`) as time-model points: each row's
architecture as a :class:`~bridgebench.model.spec.ModelSpec`, its parallel configuration as a
:class:`~bridgebench.model.steptime.config.TimeConfig` with the assumptions made where the source is silent, and the
quantity it measured (step time, per-layer time, tokens/s/GPU, TFLOP/s/GPU or MFU) as the model predicts it.
``benchmarks/validate_ablations.py`` scores them (:mod:`bridgebench.validation.metrics`).
"""

from __future__ import annotations

import re
from typing import Any, overload

from bridgebench.config.rules.upstream import without_refused_ep_overlap
from bridgebench.model.parallel import ParallelDims
from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import BUDGET_BACKENDS, GpuFacts, TimeConfig
from bridgebench.model.steptime.predict import layer_time, predict_time

TORCHTITAN_SEQ = 8192  # torchtitan's Llama 3.1 training default (torchtitan/models/llama3/train_configs: seq_len 8192)


@overload
def _int(text: str) -> int | None: ...
@overload
def _int(text: str, default: int) -> int: ...
def _int(text: str, default: int | None = None) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else default


def gpu_of(text: str) -> tuple[str, float | None]:
    """configs/gpu name and the HBM the source states when it differs from the datasheet's (GB)."""
    t = text.upper()
    if "A100" in t:
        return "a100", None
    if "GB200" in t:
        return "gb200", None
    if "B200" in t:
        return "b200", None
    if "H100" in t:
        return "h100", (96.0 if "96GB" in t.replace(" ", "") else None)
    raise ValueError(f"unknown GPU {text!r}")


def precision_of(text: str) -> str:
    """The peak key (``configs/gpu`` peaks) of a precision cell: mxfp8, fp8 or bf16."""
    t = text.lower()
    if "mxfp8" in t:
        return "mxfp8"
    if "fp8" in t or "float8" in t:
        return "fp8"
    return "bf16"  # "bf16", "mixed precision" (fp16/bf16: the same tensor-core peak)


#: ablation model names that are a ``configs/model`` architecture (their published groups' levels then apply)
SHIPPED = {"llama 3.1 405b": "llama31_405b", "llama 3.1 70b": "llama3_70b", "qwen3-30b-a3b": "qwen3_30b_a3b",
           "qwen3-235b-a22b": "qwen3_235b_a22b"}  # fmt: skip


def spec_of(r: dict[str, str]) -> ModelSpec:
    """The row's architecture: GPT-3 / GPT (Megatron papers) are GeLU MLPs with MHA, Llama / Qwen / Grok gated."""
    model = r["model"]
    gated = not model.upper().startswith(("GPT", "MT-NLG"))
    experts = _int(r["num_experts"])
    key = re.sub(r"\s*\(.*\)", "", model).strip().lower()
    return ModelSpec(
        name=SHIPPED.get(key, re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_")),
        num_layers=int(r["num_layers"]),
        hidden_size=int(r["hidden_size"]),
        ffn_hidden_size=int(r["ffn_hidden_size"] or 4 * int(r["hidden_size"])),
        num_attention_heads=int(r["num_attention_heads"]),
        num_query_groups=_int(r["num_query_groups"]),
        vocab_size=_int(r["vocab_size"], 51200),
        seq_length=_int(r["seq_length"], TORCHTITAN_SEQ),
        gated_linear_unit=gated,
        activation_func="silu" if gated else "gelu",
        num_moe_experts=experts,
        moe_router_topk=_int(r["moe_router_topk"], 2),
        moe_ffn_hidden_size=_int(r["moe_ffn_hidden_size"]),
    )


#: Megatron-LM commits the ablation sets quote, and the NeMo release of their month (the commit's date in the
#: Megatron-LM history, ``git log -1 --format=%ci``): what the row's software level is read at.
COMMIT_RELEASE = {"d48bd6be": "26.08"}  # d48bd6be0a85 (dev branch), 2026-08-21 07:03 UTC


def software_release(r: dict[str, str]) -> tuple[str | None, str | None]:
    """(NeMo release, note) of the software a row ran: the NeMo container its framework cell names
    (``nvcr.io/nvidia/nemo:24.12`` -> ``24.12``; before every published table, so the first published release's
    level applies, :mod:`bridgebench.model.steptime.release`), the month of the Megatron-LM commit its source quotes
    (:data:`COMMIT_RELEASE`), or (None, None): another framework or a paper, whose level is the group's mean."""
    m = re.search(r"nemo:(\d\d\.\d\d)", r.get("framework", "").lower())
    if m:
        return m.group(1), f"release: the NeMo {m.group(1)} container the row ran"
    for commit, release in COMMIT_RELEASE.items():
        if f"@ {commit}" in r.get("source", ""):
            return release, f"release: {release}, the month of Megatron-LM commit {commit} the source quotes"
    return None, None


def _batch(r: dict[str, str], dp: int, pp: int, notes: list[str]) -> tuple[int, int]:
    """(MBS, GBS) of a row, with what is assumed where the source is silent appended to ``notes``."""
    mbs = _int(r["mbs"])
    gbs = _int(r["gbs"])
    local = re.search(r"local batch (\d+)", r["notes"])
    if gbs is None and local:
        gbs = int(local.group(1)) * dp
        mbs = mbs or (1 if pp > 1 else int(local.group(1)))
        notes.append("GBS not stated: the stated local batch x DP; MBS 1 with PP (torchtitan's default microbatch)")
    if mbs is None:
        mbs = 1
        notes.append("MBS not stated: 1")
    if gbs is None:
        gbs = mbs * dp
        notes.append("GBS not stated: MBS x DP (no gradient accumulation)")
    return mbs, gbs


def _software(framework: str, modern: bool) -> dict[str, str]:
    """The framework's kernels a row does not state: the attention backend -- Megatron-LM before FlashAttention
    (2021-22) materializes the scores (Megatron-Core's ``local`` DotProductAttention is that code path), Megatron-Core
    / NeMo recipes run TE's fused kernel, torchtitan calls torch's SDPA (FlashAttention-2 on Hopper in torch 2.5-2.6)
    -- and whose data-parallel semantics a fully sharded row takes (``framework``)."""
    return {
        "attention_backend": "auto" if modern else "sdpa" if "torchtitan" in framework else "local",
        "framework": next((f for f in ("deepspeed", "torchtitan") if f in framework), "megatron"),
    }


#: ``moe_expert_rank_capacity_factor`` of a row that states a paged stash but not the budget (megatron-core 0.19.2
#: ``TransformerConfig.__post_init__`` refuses ``moe_paged_stash`` without it): Megatron-Bridge's 26.08 perf recipes'
#: value (``recipes/*_mxfp8/26.08.yaml``). Only its presence is priced
#: (:attr:`~bridgebench.model.steptime.config.TimeConfig.host_synced_dispatch`).
PAGED_STASH_BUDGET = 1.5


def _dispatch_of(r: dict[str, str], moe: bool, notes: list[str]) -> tuple[tuple[str, str | None], float | None]:
    """((moe_token_dispatcher_type, flex backend), moe_expert_rank_capacity_factor) of a row, from its notes;
    what was not stated goes to ``notes``."""
    dispatcher = ("flex", "hybridep") if "hybridep" in r["notes"].lower() else (
        ("flex", "deepep") if "deepep" in r["notes"].lower() else ("alltoall", None)
    )  # fmt: skip
    budget = None
    if moe and "paged stash" in r["notes"].lower():
        budget = PAGED_STASH_BUDGET
        notes.append(
            f"paged stash: Megatron-Core needs moe_expert_rank_capacity_factor for it (not stated: "
            f"{budget:g}, as the 26.08 recipes; only its presence is priced: HybridEP's static budget never waits "
            "on the host)"
        )
        if dispatcher[1] not in BUDGET_BACKENDS:
            dispatcher = ("flex", "hybridep")
            notes.append("paged stash without a dispatcher stated: that budget needs the flex dispatcher's hybridep "
                         "or ncclep backend, priced on HybridEP")  # fmt: skip
    return dispatcher, budget


def point_of(r: dict[str, str], gpu: GpuFacts) -> tuple[TimeConfig, list[str]]:
    """The row as a :class:`TimeConfig`, with the assumptions made where the source is silent."""
    notes = []
    watts = re.search(r"(\d+)\s*W limit", r["gpu"])
    if watts:  # a board power limit below the datasheet's (torchtitan's Grand Teton H100s at 500 W)
        gpu = gpu.at_power_limit(float(watts.group(1)))
    n = int(r["num_gpus"])
    tp, pp, cp = _int(r["tp"], 1), _int(r["pp"], 1), _int(r["cp"], 1)
    ep, etp = _int(r["ep"], 1), _int(r["etp"])
    vp = _int(r["vp"])
    if vp is None and "interleaved" in (r["vp"] + r["notes"]).lower() and pp > 1:
        vp = 2
        notes.append("interleaved schedule, stages per rank not stated: VP 2")
    mbs, gbs = _batch(r, ParallelDims(num_gpus=n, tp=tp, pp=pp, cp=cp).dp, pp, notes)
    rec = (r["recompute"] or "").lower()
    if not rec and r["set_id"].startswith("narayanan2021"):
        # Narayanan et al. 2021 (arXiv 2104.04473) count the recomputed forward pass in every FLOP/s figure (Eq. 3:
        # 96 B s l h^2, "with activation recomputation") because their runs recomputed: Megatron-LM's 2021 GPT
        # scripts checkpoint every transformer layer (--checkpoint-activations, one layer per checkpoint), and
        # Korthikanti et al. 2022 (arXiv 2205.05198, Table 5) list the same 175B / 530B / 1T setups as "full
        # recompute". The ZeRO-3 rows too: 175B at MBS 4 cannot hold its activations on 80 GB without it.
        rec = "full"
        notes.append("recompute not stated: full (Narayanan et al. 2021 Eq. 3; Korthikanti et al. 2022 Table 5)")
    granularity = "full" if rec.startswith("full") else "selective" if rec.startswith("selective") else None
    sp_text = (r["sequence_parallel"] or "").lower()
    framework = r["framework"].lower()
    modern = "nemo" in framework or "dev branch" in framework
    sp = sp_text.startswith("true") or (tp > 1 and bool(_int(r["num_experts"])))
    if not sp_text and modern and tp > 1:
        sp = True
        notes.append("sequence parallelism not stated: on with TP > 1 (NeMo / Megatron-Core recipes' default)")
    fsdp = "zero3" in (r["distributed_optimizer"] or "").lower() or "fsdp" in r["notes"].lower()
    async_tp = "asynctp" in r["notes"].lower().replace(" ", "")
    moe = bool(_int(r["num_experts"]))
    dispatcher, budget = _dispatch_of(r, moe, notes)
    release, why = software_release(r)
    if why:
        notes.append(why)
    cfg = TimeConfig.from_flat(
        gpu=gpu,
        release=release,
        peak_key=precision_of(r["precision"]),
        num_gpus=n,
        mbs=mbs,
        gbs=gbs,
        tp=tp,
        pp=pp,
        vp=vp if (vp and vp > 1 and pp > 1) else None,
        cp=cp,
        ep=ep,
        etp=etp,
        sequence_parallel=sp,
        recompute_granularity=granularity,
        recompute_method="uniform" if granularity == "full" else None,
        recompute_num_layers=1 if granularity == "full" else None,
        recompute_modules=("core_attn",) if granularity == "selective" else (),
        tp_comm_overlap=(modern and tp > 1 and sp) or async_tp,
        moe_token_dispatcher_type=dispatcher[0] if moe else "alltoall",
        moe_flex_dispatcher_backend=dispatcher[1] if moe else None,
        overlap_moe_expert_parallel_comm="ep overlap" in r["notes"].lower(),
        moe_expert_rank_capacity_factor=budget,
        overlap_grad_reduce=modern or "torchtitan" in framework,
        overlap_param_gather=modern,
        use_distributed_optimizer=modern,
        use_megatron_fsdp=fsdp,
        flops_formula="v2",
        **_software(framework, modern),
    )
    cfg, dropped = without_refused_ep_overlap(cfg)
    if dropped:
        notes.append(f"EP overlap stated at PP {cfg.pp} without a virtual pipeline size: Megatron-Core refuses it "
                     "there (rule ep_overlap_needs_vp), so it is priced without it")  # fmt: skip
    if not modern and "torchtitan" not in framework:
        notes.append(
            "2021-22 Megatron-LM: no distributed optimizer, no TP overlap, gradient all-reduce not overlapped, "
            "attention scores materialized (no FlashAttention yet: attention_backend=local)"
        )
    return cfg, notes


def paper_flops(spec: ModelSpec, cfg: TimeConfig, recompute: bool) -> float:
    """FLOPs per step of the Megatron papers' formula (Narayanan et al. 2021, Eq. 3, with recompute:
    ``96 B s l h^2 (1 + s/6h + V/16lh)``; Korthikanti et al. 2022, model FLOPs without it:
    ``72 B s l h^2 (1 + s/6h + V/12lh)``)."""
    b, s, n, h, v = cfg.gbs, spec.seq_length, spec.num_layers, spec.hidden_size, spec.vocab_size
    if recompute:
        return float(96 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h)))
    return float(72 * b * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h)))


def predicted_metric(r: dict[str, str], spec: ModelSpec, cfg: TimeConfig, cal: Calibration) -> float:
    """The row's measured quantity as the time model predicts it, in the row's ``measured_unit``: s/step (or s),
    ms per layer (forward + backward; Korthikanti et al. 2022 Table 4), tokens/s/GPU, TFLOP/s/GPU (the Megatron
    papers' formula for Narayanan et al. 2021, Megatron-Bridge's otherwise) or MFU in % (model FLOPs at the peak).

    Raises:
        ValueError: a unit not listed here.
    """
    unit = r["measured_unit"].strip()
    b = predict_time(spec, cfg, cal)
    if unit in ("s/step", "s"):
        return b.total
    if unit == "ms":  # forward + backward of one layer (Korthikanti Table 4)
        return 1e3 * sum(layer_time(spec, cfg, cal).values())
    if unit == "tokens/s/GPU":
        return float(cfg.gbs * spec.seq_length / b.total / cfg.num_gpus)
    if unit == "TFLOP/s/GPU":
        if r["set_id"].startswith("narayanan"):
            return float(paper_flops(spec, cfg, True) / b.total / cfg.num_gpus / 1e12)
        return b.tflops_per_gpu  # Megatron-LM's own count: Megatron-Bridge's formula (v2)
    if unit == "%":  # MFU, model FLOPs without recompute at the A100 peak
        return float(100 * paper_flops(spec, cfg, False) / b.total / cfg.num_gpus / (cfg.gpu.peak(cfg.peak_key)))
    raise ValueError(f"unit {unit!r}")


def config_key(r: dict[str, str], cfg: TimeConfig) -> tuple[Any, ...]:
    """What makes two rows the same configuration for the time model (rows that differ only in software features
    it does not see -- torch.compile, CUDA graphs -- share a key)."""
    return (r["model"], r["num_layers"], r["seq_length"], cfg.gpu.name, cfg.peak_key, cfg.num_gpus, cfg.tp, cfg.pp,
            cfg.vp, cfg.cp, cfg.ep, cfg.etp, cfg.mbs, cfg.gbs, cfg.recompute_granularity, cfg.sp,
            cfg.use_megatron_fsdp)  # fmt: skip
