"""Validate bridgebench's memory model (bridgebench.model.memory) against things nobody here wrote; prints figures.

(a) Megatron-Bridge 0.6.2's own estimator ``training/utils/theoretical_memory_utils.py::estimate_training_memory`` on
    real ConfigContainers built by bridgebench (AdamW + distributed optimizer, BF16, fp32 grads, selective recompute,
    SP when TP > 1): model state (weights + grads + optimizer) and total, per case.
(b) Measured memory: Megatron-LM's golden values (results/reference/golden: ``mem-allocated-bytes`` vs predicted
    static = weights + grads + optimizer + the calibrated constant; ``mem-max-allocated-bytes`` vs the predicted
    peak) and the memory lines of real logs (tests/data/logs, parsed by bridgebench.logs.parser).

    PYTHONPATH=src .venv/bin/python benchmarks/validate_memory.py [--skip-mb] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from bridgebench import sweep as engine  # noqa: E402
from bridgebench.config import calibration  # noqa: E402
from bridgebench.logs.parser import parse_log  # noqa: E402
from bridgebench.model.memory import MemoryConfig, dist_muon_state_by_rank, estimate_memory  # noqa: E402
from bridgebench.model.spec import ModelSpec  # noqa: E402
from bridgebench.validation.golden import golden_cases, golden_memory_config, golden_spec  # noqa: E402

GB = 1e9
MIB = 2**20
COMMON = [
    "optimizer=adamw",
    "precision=bf16",
    "++ddp.grad_reduce_in_fp32=true",
    "++mixed_precision.grad_reduce_in_fp32=true",
    "++model.recompute_granularity=selective",
    "++model.recompute_modules=[core_attn]",
    "++model.recompute_method=null",  # Qwen3 30B-A3B's base recipe recomputes full layers (uniform, 1)
    "++model.recompute_num_layers=null",
]
SP = "model.sequence_parallel=true"
A_CASES = [
    ["model=llama3_70b", "num_gpus=64", "train.global_batch_size=128"],
    [
        "model=llama3_70b",
        "num_gpus=64",
        "train.global_batch_size=128",
        "model.tensor_model_parallel_size=4",
        "model.pipeline_model_parallel_size=4",
        "model.virtual_pipeline_model_parallel_size=5",
        SP,
    ],
    ["model=llama3_70b", "num_gpus=64", "train.global_batch_size=128", "model.tensor_model_parallel_size=8", SP],
    [
        "model=llama31_405b",
        "num_gpus=256",
        "train.global_batch_size=256",
        "model.tensor_model_parallel_size=8",
        "model.pipeline_model_parallel_size=8",
        "model.virtual_pipeline_model_parallel_size=2",
        "model.context_parallel_size=2",
        SP,
    ],
    [
        "model=llama31_405b",
        "num_gpus=1024",
        "train.global_batch_size=1536",
        "model.tensor_model_parallel_size=8",
        "model.pipeline_model_parallel_size=8",
        "model.virtual_pipeline_model_parallel_size=2",
        "model.context_parallel_size=2",
        SP,
    ],
    ["model=qwen3_30b_a3b", "num_gpus=8", "model.expert_model_parallel_size=8", "train.global_batch_size=512"],
    [
        "model=qwen3_30b_a3b",
        "num_gpus=16",
        "model.tensor_model_parallel_size=2",
        "model.pipeline_model_parallel_size=2",
        "model.expert_model_parallel_size=8",
        "model.expert_tensor_parallel_size=1",
        "train.global_batch_size=1024",
        SP,
    ],
    [
        "model=qwen3_30b_a3b",
        "num_gpus=64",
        "model.tensor_model_parallel_size=2",
        "model.expert_model_parallel_size=16",
        "model.expert_tensor_parallel_size=1",
        "train.micro_batch_size=2",
        "train.global_batch_size=512",
        SP,
    ],
    [
        "model=qwen3_235b_a22b",
        "num_gpus=256",
        "model.tensor_model_parallel_size=4",
        "model.pipeline_model_parallel_size=2",
        "model.expert_model_parallel_size=16",
        "model.expert_tensor_parallel_size=2",
        "train.global_batch_size=2048",
        SP,
    ],
]


def part_a() -> list[dict]:
    warnings.filterwarnings("ignore")
    from bridgebench.mbridge import setup
    from bridgebench.mbridge.build import build

    setup()
    from megatron.bridge.training.utils.theoretical_memory_utils import estimate_training_memory

    calib = dataclasses.replace(calibration.load(), other_bytes=0.0)
    print("(a) bridgebench vs Megatron-Bridge 0.6.2 estimate_training_memory on built ConfigContainers")
    print(
        "    AdamW + distributed optimizer, BF16, fp32 grads, selective recompute (core_attn), SP with TP > 1; "
        "GB = 1e9 B"
    )
    print(f"{'case':62s} {'MB state':>9s} {'ours':>8s} {'err':>7s} | {'MB total':>9s} {'ours':>8s} {'err':>7s}")
    out = []
    for ov in A_CASES:
        base = engine.base_of(ov + COMMON)
        container = build(base.cfg).container
        if getattr(container, "data_parallel_size", None) is None:
            container.data_parallel_size = container.get_data_parallel_size(int(base.cfg.num_gpus))
        cfg = engine.memory_config(engine.effective(base, {}), calib)
        mb = estimate_training_memory(container, num_microbatches=cfg.num_microbatches)
        ours = estimate_memory(base.spec, cfg)
        es = ours.model_state / mb.weight_and_optimizer_bytes - 1
        et = ours.total / mb.total_memory_bytes - 1
        label = (
            f"{base.spec.name} N{cfg.num_gpus} TP{cfg.tp} PP{cfg.pp} VP{cfg.vp or '-'} CP{cfg.cp} EP{cfg.ep} "
            f"ETP{cfg.etp_} MBS{cfg.mbs}"
        )
        print(
            f"{label:62s} {mb.weight_and_optimizer_bytes / GB:9.2f} {ours.model_state / GB:8.2f} {100 * es:+6.2f}% | "
            f"{mb.total_memory_bytes / GB:9.2f} {ours.total / GB:8.2f} {100 * et:+6.1f}%"
        )
        out.append({"case": label, "moe": base.spec.is_moe, "err_state": es, "err_total": et})
    for kind, rows in (("dense", [r for r in out if not r["moe"]]), ("MoE", [r for r in out if r["moe"]])):
        s = [abs(r["err_state"]) for r in rows]
        t = [abs(r["err_total"]) for r in rows]
        print(
            f"  {kind}: model state max |err| {100 * max(s):.2f}% ({sum(x <= 0.1 for x in s)}/{len(s)} within 10%); "
            f"total max |err| {100 * max(t):.1f}% ({sum(x <= 0.1 for x in t)}/{len(t)} within 10%)"
        )
    print("  MoE totals: MB stores no dispatched token (k copies per token for the grouped GEMM's weight gradient);")
    print("  tests/model/test_memory_vs_megatron_bridge.py shows the totals agree within 5 % without that term.")
    return out


def part_b() -> list[dict]:
    other = calibration.load().other_bytes
    print("\n(b1) Megatron-LM golden values (median over logged steps) vs predicted; GB = 1e9 B")
    print("     static = weights + grads + optimizer + other vs mem-allocated; peak vs mem-max-allocated")
    print("     (Megatron logs memory from the last rank: legacy dist_muon uses that rank's ping-pong share)")
    rows = []
    for case in golden_cases():
        spec, cfg = golden_spec(case.args), golden_memory_config(case, other)
        b = estimate_memory(spec, cfg)
        static = b.model_state + b.other
        if cfg.optimizer == "dist_muon" and not cfg.use_distributed_optimizer:
            static += dist_muon_state_by_rank(spec, cfg)[-1] - b.optimizer_state
        peak = b.total - (b.model_state + b.other) + static
        es, ep = static / case.mem_allocated - 1, peak / case.mem_max_allocated - 1
        print(
            f"  {case.short:30s} {case.hardware:14s} alloc {case.mem_allocated / GB:.3f} pred {static / GB:.3f} "
            f"({100 * es:+5.1f}%)  max-alloc {case.mem_max_allocated / GB:.3f} pred {peak / GB:.3f} ({100 * ep:+5.1f}%)"
        )
        rows.append({"case": case.short, "hw": case.hardware, "err_static": es, "err_peak": ep})
    es = [abs(r["err_static"]) for r in rows if "a100" not in r["hw"]]
    ep = [abs(r["err_peak"]) for r in rows]
    print(
        f"  static (H100/GB200): mean |err| {100 * statistics.mean(es):.1f}% max {100 * max(es):.1f}%; "
        f"peak: mean |err| {100 * statistics.mean(ep):.1f}% max {100 * max(ep):.1f}%, within 15%: "
        f"{sum(x <= 0.15 for x in ep)}/{len(ep)}"
    )
    print(
        "  A100 Adam static +21%: that file (older, every 5th step) logs 146 MB less than its H100/GB200 twins for the"
    )
    print("  same run; the constant 'other' was calibrated on H100/GB200 (cuBLAS/TE workspaces differ by GPU).")
    print("  Peaks are 5-12% under: transient autograd / loss-backward buffers and the allgather dispatcher's token")
    print("  buffer are not modelled (the static terms, which they sit on, match within 2%).")

    print("\n(b2) real logs (tests/data/logs), memory lines parsed by bridgebench.logs.parser")
    logs = REPO / "tests" / "data" / "logs"
    # Megatron-Bridge Llama recipe, 8 ranks TP1 PP1 CP2, MBS 1, GBS 8, seq 4096 (logs/INDEX.csv); 32 layers, h 4096,
    # 32 heads (MHA), vocab 32000 (untied); FFN 12288 reproduces the logged 6.98 B transformer / 7.24 B total params
    llama7 = ModelSpec(
        name="llama_7b_log",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=12288,
        num_attention_heads=32,
        vocab_size=32000,
        seq_length=4096,
    )
    # Llama 3.1 8B (configs: Hugging Face meta-llama/Llama-3.1-8B), 8 GPUs TP1 PP1 CP1, MBS 4, GBS 128, seq 8192, BF16
    llama8 = ModelSpec(
        name="llama31_8b_log",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=128256,
        seq_length=8192,
    )
    cases = [
        (
            "mbridge_llama_7b_cp2_8rank_20iter_out1.log",
            llama7,
            MemoryConfig.from_flat(num_gpus=8, mbs=1, gbs=8, cp=2),
            "recompute not logged: none assumed; grads fp32 (MB bf16_mixed default)",
        ),
        (
            "dgxc_llama31_8b_ckpt_resume_mem_gb.log",
            llama8,
            MemoryConfig.from_flat(num_gpus=8, mbs=4, gbs=128),
            "recompute not logged: none assumed; grads fp32; unfused CE; CUDA graphs on (their buffers not modelled)",
        ),
        (
            "dgxc_llama31_8b_ckpt_resume_mem_gb.log",
            llama8,
            MemoryConfig.from_flat(
                num_gpus=8, mbs=4, gbs=128, grad_reduce_in_fp32=False, cross_entropy_loss_fusion=True
            ),
            "same, with bf16 grads and fused CE (the perf recipes' settings, not visible in the log)",
        ),
    ]
    for name, spec, cfg, note in cases:
        cfg = dataclasses.replace(cfg, other_bytes=other)
        mem = parse_log(logs / name).memory
        alloc, peak = mem["allocated_mb"] * MIB, mem["peak_allocated_mb"] * MIB
        b = estimate_memory(spec, cfg)
        static = b.model_state + b.other
        # the logs report after iteration 1: Adam's state is created by the first step, after the forward/backward
        # peak -> the first-iteration peak is max(weights + grads + activations, static)
        first_peak = max(b.total - b.optimizer_state, static)
        es, ep, e1 = static / alloc - 1, b.total / peak - 1, first_peak / peak - 1
        print(
            f"  {name:48s} alloc {alloc / GB:6.2f} pred {static / GB:6.2f} ({100 * es:+5.1f}%)  max-alloc "
            f"{peak / GB:6.2f} pred {b.total / GB:6.2f} ({100 * ep:+5.1f}%), first-iteration peak "
            f"{first_peak / GB:6.2f} ({100 * e1:+5.1f}%)  [{note}]"
        )
        rows.append({"case": name, "err_static": es, "err_peak": ep, "err_peak_first_iteration": e1})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-mb", action="store_true", help="skip (a) (it imports Megatron-Bridge and builds configs)")
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    args = ap.parse_args()
    a = [] if args.skip_mb else part_a()
    b = part_b()
    if args.json:
        args.json.write_text(json.dumps({"megatron_bridge": a, "measured": b}, indent=1))


if __name__ == "__main__":
    main()
