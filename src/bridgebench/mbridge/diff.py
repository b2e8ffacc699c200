"""Field-by-field differences between resolved Megatron-Bridge ``ConfigContainer``s (``bridgebench diff-config``,
the fidelity tests).

A side is a list of bridgebench overrides (``["recipe=qwen3_30b_a3b_gb300_mxfp8", "release=26.02"]``); it is composed,
built as a plan builds it (:func:`bridgebench.mbridge.build.build`, run policies included, not validated: the
container as the recipe returns it), flattened (:mod:`bridgebench.mbridge.flatten`) and normalized (pipeline layouts
expanded, env values as strings) so that equivalent encodings compare equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

MISSING = "<absent>"


@dataclass(frozen=True, kw_only=True)
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
        FieldDiff(field=k, a=a.get(k, MISSING), b=b.get(k, MISSING))
        for k in keys
        if not ignored(k) and a.get(k, MISSING) != b.get(k, MISSING)
    ]


def resolved(overrides: Sequence[str], *, policies: bool = True) -> dict[str, Any]:
    """The normalized flat container bridgebench builds for ``overrides`` (imports megatron; seconds).

    Raises:
        bridgebench.config.ConfigError: bad overrides; BuildError: Megatron-Bridge rejects a field.
    """
    from bridgebench.mbridge.recipes import built_flat

    return built_flat(list(overrides), policies=policies)


def diff_config(a: Sequence[str], b: Sequence[str]) -> list[FieldDiff]:
    """Fields in which the containers of two override lists differ (see the module docstring)."""
    return compare(resolved(a), resolved(b))


def to_rows(diffs: Sequence[FieldDiff]) -> list[dict[str, Any]]:
    """Plain dicts (``field``, ``a``, ``b``) for JSON."""
    return [{"field": d.field, "a": d.a, "b": d.b} for d in diffs]
