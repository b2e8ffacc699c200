"""Megatron-LM's functional-test golden values (``configs/paths`` ``golden``: ``results/reference/golden``, shipped;
``BRIDGEBENCH_GOLDEN`` moves it): measured memory and iteration time of a
12-layer 8-expert MoE GPT trained with Adam (distributed optimizer), ``muon`` and layer-wise ``dist_muon`` on DGX
H100 / GB200 / A100 (Megatron-LM@d98e8a6 ``tests/functional_tests/test_cases/moe/gpt3_moe_mcore_te_ep8_*``).

Each case's model and run come from its own ``model_config.yaml`` (Megatron-LM command-line flags), read here with
Megatron-LM's defaults for the flags it leaves out (``megatron/training/arguments.py``): FFN ``4 h``, GELU (no
``--swiglu``), LayerNorm, learned absolute positions, tied embedding and output layer, vocabulary padded to a
multiple of 128 (GPT-2 BPE: 50,257 tokens), hidden dropout 0.1, gradients accumulated and reduced in fp32 under
``--bf16``. ``--optimizer muon`` with ``--use-distributed-optimizer`` is the layer-wise distributed Muon
(``dist_muon``), with ``--no-use-layer-wise-param-layout`` on its legacy (ping-pong) path.
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from bridgebench.model.memory import MemoryConfig
from bridgebench.model.spec import ModelSpec
from bridgebench.validation.data import require

GPT2_VOCAB = 50257  # GPT-2 BPE vocab.json (the cases' --vocab-file)


@dataclass(frozen=True)
class GoldenCase:
    """One golden-values file: the case, the hardware, its Adam twin, the run's flags and the measured medians
    (``mem_allocated`` / ``mem_max_allocated`` in bytes over all logged steps; ``iter_time_median_s`` from
    INDEX.csv, steps 10 onward)."""

    test_case: str
    hardware: str
    role: str
    twin: str
    num_gpus: int
    args: dict[str, Any]
    mem_allocated: float
    mem_max_allocated: float
    iter_time_median_s: float | None

    @property
    def short(self) -> str:
        return self.test_case.replace("gpt3_moe_mcore_te_ep8_resume_torch_dist_", "")

    @property
    def gpu(self) -> str:
        return self.hardware.replace("dgx_", "").replace("_2nd", "")


def _median(values: dict[str, Any]) -> float:
    return statistics.median(v for v in values.values() if isinstance(v, (int, float)) and v == v)


@cache
def golden_cases() -> tuple[GoldenCase, ...]:
    """Every golden-values file listed in ``golden/INDEX.csv`` (one per case and hardware).

    Raises:
        bridgebench.validation.data.ReferenceDataMissing: the golden folder or its ``INDEX.csv`` is absent.
    """
    golden = require("golden", "INDEX.csv")
    out = []
    seen = set()
    with open(golden / "INDEX.csv") as f:
        for row in csv.DictReader(f):
            key = (row["test_case"], row["hardware"])
            if key in seen or not row["golden_file"]:
                continue
            seen.add(key)
            data = json.loads((golden / row["golden_file"]).read_text())
            if "mem-allocated-bytes" not in data:
                continue
            config = yaml.safe_load((golden / row["test_case"] / "model_config.yaml").read_text())
            nodes, gpus = (int(x) for x in row["nodes_x_gpus"].split("x"))
            median = row["iter_time_median_s_steps10_end"]
            out.append(
                GoldenCase(
                    test_case=row["test_case"],
                    hardware=row["hardware"],
                    role=row["role"],
                    twin=row["twin"],
                    num_gpus=nodes * gpus,
                    args=config["MODEL_ARGS"],
                    mem_allocated=_median(data["mem-allocated-bytes"]["values"]),
                    mem_max_allocated=_median(data["mem-max-allocated-bytes"]["values"]),
                    iter_time_median_s=float(median) if median else None,
                )
            )
    return tuple(out)


def golden_spec(args: dict[str, Any]) -> ModelSpec:
    """The model of a golden case from its Megatron-LM flags (defaults: see the module docstring)."""
    h = int(args["--hidden-size"])
    swiglu = bool(args.get("--swiglu"))
    return ModelSpec(
        name="golden_moe",
        num_layers=int(args["--num-layers"]),
        hidden_size=h,
        ffn_hidden_size=int(args.get("--ffn-hidden-size", 4 * h)),
        num_attention_heads=int(args["--num-attention-heads"]),
        vocab_size=GPT2_VOCAB,
        seq_length=int(args["--seq-length"]),
        gated_linear_unit=swiglu,
        activation_func="silu" if swiglu else "gelu",
        add_bias_linear=not args.get("--disable-bias-linear", False),
        num_moe_experts=int(args["--num-experts"]) if "--num-experts" in args else None,
        moe_ffn_hidden_size=int(args["--moe-ffn-hidden-size"]) if "--moe-ffn-hidden-size" in args else None,
        moe_router_topk=int(args.get("--moe-router-topk", 2)),
        make_vocab_size_divisible_by=int(args.get("--make-vocab-size-divisible-by", 128)),
        share_embeddings_and_output_weights=not args.get("--untie-embeddings-and-output-weights", False),
        extra={
            "normalization": args.get("--normalization", "LayerNorm"),
            "max_position_embeddings": int(args["--max-position-embeddings"]),
        },
    )


def golden_memory_config(case: GoldenCase, other_bytes: float = 0.0) -> MemoryConfig:
    """The memory model's view of a golden run (see the module docstring for the optimizer flags)."""
    a = case.args
    distributed = bool(a.get("--use-distributed-optimizer"))
    if a.get("--optimizer", "adam") == "muon":
        optimizer = "dist_muon" if distributed else "muon"
        layout_path = distributed and not a.get("--no-use-layer-wise-param-layout")
    else:
        optimizer, layout_path = "adam", distributed
    return MemoryConfig.from_flat(
        num_gpus=case.num_gpus,
        mbs=int(a["--micro-batch-size"]),
        gbs=int(a["--global-batch-size"]),
        tp=int(a.get("--tensor-model-parallel-size", 1)),
        pp=int(a.get("--pipeline-model-parallel-size", 1)),
        ep=int(a.get("--expert-model-parallel-size", 1)),
        optimizer=optimizer,
        use_distributed_optimizer=layout_path,
        grad_reduce_in_fp32=True,
        hidden_dropout=float(a.get("--hidden-dropout", 0.1)) > 0,
        other_bytes=other_bytes,
    )
