"""bridgebench: recipes and benchmarks for LLM pretraining on NVIDIA NeMo / Megatron-Bridge.

Layers, bottom to top (enforced by import-linter contracts in pyproject.toml):
``model`` (FLOPs, Newton-Schulz, MFU: pure Python) -> ``config`` (Hydra compose, schema, rules, run facts) ->
``mbridge`` (Megatron-Bridge adapter), ``logs`` (log parsing), ``results`` (records, store, tables) ->
``payloads`` (what runs on a compute node) -> ``launch`` (plan, submit, collect) -> ``cli``.
"""

__version__ = "0.2.0"
