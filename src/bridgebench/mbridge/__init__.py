"""The Megatron-Bridge adapter: real ``ConfigContainer``s, providers and API differences between releases.

Nothing here runs at import time. Call :func:`setup` once before importing ``megatron.bridge`` on a planning machine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Iterator

from bridgebench.paths import environ_set

_done = False


def setup() -> None:
    """Prepare this process to import Megatron-Bridge for planning, and import it (idempotent; once per process).

    1. Seed the offline Hugging Face cache from the shipped ``config.json`` files and set ``HF_HUB_OFFLINE=1``
       (:mod:`bridgebench.mbridge.hf_cache`): recipes read HF configs, and bridgebench never reaches the hub.
    2. Install the Transformer Engine import stand-in when TE is missing (:mod:`bridgebench.mbridge.te_stub`):
       Megatron-Bridge 0.6.2 ``peft/lora_layers.py`` imports ``transformer_engine.pytorch`` unconditionally.
       It can never build a model.
    3. Import ``megatron.bridge`` (seconds) with its import-time output sent to the debug log
       (:func:`bridgebench.debuglog.captured`): Transformer Engine import tracebacks, "No CUDA runtime is found".

    Where Transformer Engine is missing the process can only plan (the stand-in builds no model), so the import runs
    with ``TORCHDYNAMO_DISABLE=1`` (restored afterwards: jobs submitted later never inherit it): Megatron-Core's
    ``jit_fuser`` (``torch.compile``) then wraps its fused kernels without loading TorchInductor, about a second
    of CPU. With Transformer Engine (a compute node) nothing is switched off. ``importlib.metadata``'s
    ``packages_distributions()``, which transformers and diffusers each compute at import (about a second each on
    this stack), is computed once per process -- and, where the process can only plan, kept on disk per set of
    installed distributions (:func:`_packages_distributions_cached`).
    """
    global _done
    if _done:
        return
    from bridgebench.debuglog import captured
    from bridgebench.mbridge import hf_cache, te_stub

    hf_cache.activate()
    with captured(), _planning_imports(not te_stub.te_available()):
        te_stub.install()
        import megatron.bridge  # noqa: F401
    _done = True


def _installed_fingerprint() -> str:
    """SHA-256 over every ``*.dist-info`` / ``*.egg-info`` entry (name and modification time) of every ``sys.path``
    folder: installing, upgrading or removing a distribution changes it."""
    import hashlib

    h = hashlib.sha256(sys.version.encode())
    for folder in sys.path:
        try:
            entries = sorted(os.scandir(folder or "."), key=lambda e: e.name)
        except OSError:
            continue
        h.update(f"\0{folder}\0".encode())
        for e in entries:
            if e.name.endswith((".dist-info", ".egg-info")):
                try:
                    h.update(f"{e.name}:{e.stat().st_mtime_ns}\0".encode())
                except OSError:
                    h.update(e.name.encode())
    return h.hexdigest()


def _packages_distributions_cached(compute):
    """``importlib.metadata.packages_distributions`` computed once per set of installed distributions: kept in
    ``configs/paths``' cache folder under :func:`_installed_fingerprint` (it reads every distribution's file list:
    about a second on this stack, in every process that imports transformers and diffusers)."""
    import json

    try:
        from bridgebench.paths import load_paths

        folder = load_paths().cache / "packages_distributions"
        path = folder / f"{_installed_fingerprint()}.json"
        if path.is_file():
            return json.loads(path.read_text())
    except Exception:  # noqa: BLE001  (no cache, an unreadable one: compute it)
        return compute()
    value = compute()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value))
        tmp.replace(path)
    except OSError:
        pass
    return value


@contextlib.contextmanager
def _planning_imports(planning_only: bool) -> Iterator[None]:
    import importlib.metadata as md

    if not getattr(md.packages_distributions, "_bridgebench_once", False):
        original = md.packages_distributions
        if planning_only and os.environ.get("BRIDGEBENCH_CACHE", "").strip().lower() not in ("off", "0", "none"):
            once = functools.cache(lambda: _packages_distributions_cached(original))
        else:
            once = functools.cache(original)
        once._bridgebench_once = True  # type: ignore[attr-defined]
        once._bridgebench_original = original  # type: ignore[attr-defined]  (the stdlib's, for tests)
        md.packages_distributions = once
    if not planning_only or "torch" in sys.modules and "megatron.core" in sys.modules:
        yield
        return
    with environ_set("TORCHDYNAMO_DISABLE", "1"):
        yield
