"""The command and the scaled-down optimizer-step experiment the local-cluster end-to-end tests submit.

A Qwen3 MoE cut to hidden 256 with 8 experts, so one job takes seconds on the 2-CPU local node; each test adds its own
``job.repeats``.
"""

from __future__ import annotations

import sys

BB = [sys.executable, "-m", "bridgebench.cli"]
SMALL = [
    "experiment=optstep_local",
    "model.hidden_size=256",
    "model.ffn_hidden_size=512",
    "model.moe_ffn_hidden_size=128",
    "model.num_attention_heads=8",
    "model.num_query_groups=2",
    "model.kv_channels=32",
    "model.num_moe_experts=8",
]
