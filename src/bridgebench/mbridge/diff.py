"""Field-by-field differences between resolved Megatron-Bridge ``ConfigContainer``s (``bridgebench diff-config``,
the fidelity tests).

A side is a list of bridgebench overrides (``["recipe=qwen3_30b_a3b_gb300_mxfp8", "release=26.02"]``); it is composed,
built as a plan builds it (:func:`bridgebench.mbridge.build.build`, not validated: the container as the recipe returns
it), dumped with Megatron's own ``to_yaml`` and flattened to dotted fields (``model.tensor_model_parallel_size``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

MISSING = "<absent>"


@dataclass(frozen=True)
class FieldDiff:
    """One field whose value differs (``MISSING`` where a side has no such field)."""

    field: str
    a: Any
    b: Any


def compare(a: dict[str, Any], b: dict[str, Any], *, ignore: Sequence[str] = ()) -> list[FieldDiff]:
    """Fields of two flat maps whose values differ, in ``a``'s order then ``b``'s extra keys.

    Args:
        ignore: dotted fields (or ``prefix.*``) left out.
    """

    def ignored(key: str) -> bool:
        return any(key == p or (p.endswith(".*") and key.startswith(p[:-1])) for p in ignore)

    keys = list(a) + [k for k in b if k not in a]
    return [
        FieldDiff(k, a.get(k, MISSING), b.get(k, MISSING))
        for k in keys
        if not ignored(k) and a.get(k, MISSING) != b.get(k, MISSING)
    ]


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out |= _flatten(v, f"{prefix}{k}.")
        return out
    return {prefix[:-1]: node}


def resolved(overrides: Sequence[str]) -> dict[str, Any]:
    """The flat container bridgebench builds for ``overrides`` (imports megatron; seconds). Fields whose value depends
    on where the process runs (``*.save``, ``*.load``, ``*_dir`` paths) are kept: both sides are built here.

    Raises:
        bridgebench.config.compose.ConfigError: bad overrides; BuildError: Megatron-Bridge rejects a field.
    """
    import tempfile

    import yaml

    from bridgebench.config.compose import compose
    from bridgebench.mbridge.build import build

    result = build(compose(list(overrides)), validate=False)
    with tempfile.NamedTemporaryFile("r", suffix=".yaml") as f:
        result.container.to_yaml(f.name)
        data = yaml.safe_load(open(f.name).read())
    return _flatten(data)


def diff_config(a: Sequence[str], b: Sequence[str]) -> list[FieldDiff]:
    """Fields in which the containers of two override lists differ (see the module docstring)."""
    return compare(resolved(a), resolved(b))


def to_rows(diffs: Sequence[FieldDiff]) -> list[dict[str, Any]]:
    """Plain dicts (``field``, ``a``, ``b``) for JSON."""
    return [{"field": d.field, "a": d.a, "b": d.b} for d in diffs]
