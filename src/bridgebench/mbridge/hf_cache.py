"""Seed a private Hugging Face cache with the shipped ``config.json`` files, so Megatron-Bridge recipes
(``AutoBridge.from_hf_pretrained(<repo id>)``) work offline.

Layout written (huggingface_hub cache format): ``<cache>/models--<org>--<name>/snapshots/<revision>/config.json`` and
``refs/main`` -> ``<revision>``. Where a Megatron-Bridge recipe pins a revision, the snapshot is written at that
revision too. Call :func:`activate` before importing transformers / megatron.bridge: it sets ``HF_HUB_CACHE`` and
``HF_HUB_OFFLINE=1`` (and ``TRANSFORMERS_OFFLINE=1``), which huggingface_hub reads at import time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from bridgebench.paths import load_paths

SHIPPED = Path(__file__).resolve().parent / "hf_configs"

#: Revisions pinned by Megatron-Bridge 0.6.2 recipes (``_<MODEL>_MODEL_REVISION`` constants).
PINNED_REVISIONS = {
    "Qwen/Qwen3-30B-A3B": ["ad44e777bcd18fa416d9da3bd8f70d33ebb85d39"],  # recipes/qwen/h100/qwen3_moe.py
}


def repo_ids() -> list[str]:
    """Hugging Face repo ids whose config.json ships with bridgebench."""
    return sorted(d.name.replace("__", "/", 1) for d in SHIPPED.iterdir() if (d / "config.json").exists())


def seed(cache_dir: Path | None = None) -> Path:
    """Write the cache layout under ``cache_dir`` (default: ``configs/paths`` hf_cache; idempotent) and return it."""
    cache_dir = Path(cache_dir or load_paths().hf_cache)
    for repo_id in repo_ids():
        src = SHIPPED / repo_id.replace("/", "__", 1) / "config.json"
        repo = cache_dir / ("models--" + repo_id.replace("/", "--"))
        local_rev = hashlib.sha1(src.read_bytes()).hexdigest()  # a stable 40-hex name for the shipped content
        for rev in [local_rev, *PINNED_REVISIONS.get(repo_id, [])]:
            snap = repo / "snapshots" / rev
            snap.mkdir(parents=True, exist_ok=True)
            if not (snap / "config.json").exists() or (snap / "config.json").read_bytes() != src.read_bytes():
                tmp = snap / "config.json.tmp"
                shutil.copyfile(src, tmp)
                tmp.replace(snap / "config.json")
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(local_rev)
    return cache_dir


def activate(cache_dir: Path | None = None) -> Path:
    """Seed the cache and point huggingface_hub at it, offline. Returns the cache directory."""
    cache_dir = seed(cache_dir)
    os.environ["HF_HUB_CACHE"] = str(cache_dir)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # huggingface_hub reads these at import: if something imported it before setup(), point its constants here too
    # (its download functions read ``constants.HF_HUB_CACHE`` / ``constants.HF_HUB_OFFLINE`` at call time).
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:
        hub.HF_HUB_CACHE = str(cache_dir)
        hub.HF_HUB_OFFLINE = True
    return cache_dir
