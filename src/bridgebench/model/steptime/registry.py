"""Hashable handles for the step-time model's caches: a :class:`~bridgebench.model.spec.ModelSpec` or a
:class:`~bridgebench.model.steptime.config.GpuFacts` holds a dict, so neither hashes; each is registered once under
its ``id`` (the registry keeps it alive, so an id is never reused for another object) and the caches key on that."""

from __future__ import annotations

from typing import Any

_OBJECTS: dict[int, Any] = {}


def handle(obj: Any) -> int:
    """The cache key of ``obj`` (registered on first use)."""
    key = id(obj)
    if key not in _OBJECTS:
        _OBJECTS[key] = obj
    return key


def get(key: int) -> Any:
    """The object registered under ``key``."""
    return _OBJECTS[key]
