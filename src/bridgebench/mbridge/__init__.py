"""The Megatron-Bridge adapter: real ``ConfigContainer``s, providers and API differences between releases.

Nothing here runs at import time. Call :func:`setup` once before importing ``megatron.bridge`` on a planning machine.
"""

from __future__ import annotations


def setup() -> None:
    """Prepare this process to import Megatron-Bridge for planning (idempotent).

    1. Seed the offline Hugging Face cache from the shipped ``config.json`` files and set ``HF_HUB_OFFLINE=1``
       (:mod:`bridgebench.mbridge.hf_cache`): recipes read HF configs, and bridgebench never reaches the hub.
    2. Install the Transformer Engine import stand-in when TE is missing (:mod:`bridgebench.mbridge.te_stub`):
       Megatron-Bridge 0.6.2 ``peft/lora_layers.py`` imports ``transformer_engine.pytorch`` unconditionally.
       It can never build a model.
    """
    from bridgebench.mbridge import hf_cache, te_stub

    hf_cache.activate()
    te_stub.install()
