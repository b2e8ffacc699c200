"""OmegaConf nodes as plain Python mappings, typed: ``OmegaConf.to_container`` returns a dict, a list, a string or
None depending on the node; a config section is always a mapping, which :func:`plain_dict` checks."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf


def plain_dict(node: Any, *, resolve: bool) -> dict[str, Any]:
    """``OmegaConf.to_container(node, resolve=resolve)`` of a mapping node (interpolations resolved or kept).

    Raises:
        TypeError: the node is not a mapping (a list or a scalar).
    """
    data = OmegaConf.to_container(node, resolve=resolve)
    if not isinstance(data, dict):
        raise TypeError(f"expected a mapping config node, got {type(data).__name__}")
    return {str(k): v for k, v in data.items()}
