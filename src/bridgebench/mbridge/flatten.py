"""A Megatron-Bridge ``ConfigContainer`` as a flat ``{dotted.field: plain value}`` map, for comparing containers
field by field (fidelity tests, ``bridgebench diff-config``, recipe generation).

Pure Python (dataclasses, enum, functools): it imports neither torch nor megatron, so a script running under another
release's Megatron-Bridge can load this file by path and write dumps in the same format
(``tests/data/upstream_recipes/make_dumps.py``).

Encoding of one leaf (the dumps under ``tests/data/upstream_recipes/`` use it):

- ``None``, bool, int, float, str: as is; a string containing the working directory has it replaced by ``${CWD}``.
- ``torch.dtype``: ``"torch.bfloat16"``; an ``Enum`` member: ``"ClassName.MEMBER"``.
- list / tuple / set: a list; dict: a dict with string keys; a nested dataclass inside a list or dict: a dict of its
  fields.
- ``functools.partial``: ``"partial(<callable f>, args=[...], kwargs={...})"``; any other callable:
  ``"<callable module.qualname>"``; anything else: ``"<module.Class> repr"`` (cut at 300 characters).

A nested dataclass section adds ``<path>.__class__`` (``module.qualname``) and its fields under ``<path>.``;
attributes set on an instance that are not dataclass fields (e.g. ``env_vars`` on 0.3.x containers) are included.
``env_vars`` (a dict) gives one key per variable, ``env_vars.<NAME>``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import os
from typing import Any

#: Top-level sections first, in this order (the rest follow in the container's own field order). The order
#: ``bridgebench.config.schema.MB_SECTIONS`` applies them in, kept here because this file imports nothing from
#: bridgebench (it is loaded by path under older releases); ``tests/mbridge/test_diff_config.py`` checks they agree.
SECTION_ORDER = (
    "model",
    "train",
    "validation",
    "optimizer",
    "scheduler",
    "ddp",
    "mixed_precision",
    "comm_overlap",
    "checkpoint",
    "logger",
    "tokenizer",
    "dataset",
    "rng",
    "dist",
    "rerun_state_machine",
    "profiling",
)
MAX_DEPTH = 6


def plain(value: Any, cwd: str | None = None) -> Any:
    """One leaf as a YAML/JSON-safe value (encoding in the module docstring)."""
    if isinstance(value, enum.Enum):  # before int: IntEnum members (signal.Signals) are ints
        return f"{type(value).__name__}.{value.name}"
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value.replace(cwd, "${CWD}") if cwd and cwd in value else value
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, cwd) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v, cwd) for k, v in value.items()}
    if isinstance(value, functools.partial):
        return (
            f"partial({plain(value.func, cwd)}, args={plain(list(value.args), cwd)}, "
            f"kwargs={plain(value.keywords, cwd)})"
        )
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name, None), cwd) for f in dataclasses.fields(value)}
    if callable(value):
        mod = getattr(value, "__module__", None) or ""
        name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type(value).__name__
        return f"<callable {mod}.{name}>"
    return f"<{type(value).__module__}.{type(value).__qualname__}> {value!r}"[:300]


def _names(obj: Any, top: bool) -> list[str]:
    names = [f.name for f in dataclasses.fields(obj)]
    names += [k for k in vars(obj) if k not in names and not k.startswith("__")]
    if top:
        names = [n for n in SECTION_ORDER if n in names] + [n for n in names if n not in SECTION_ORDER]
    return names


def flatten(container: Any, *, cwd: str | None = None) -> dict[str, Any]:
    """``{dotted.field: plain value}`` of a (Megatron-Bridge) dataclass tree.

    Args:
        container: a ``ConfigContainer`` (any dataclass instance).
        cwd: directory replaced by ``${CWD}`` in string values; defaults to the current working directory.
    """
    cwd = os.getcwd() if cwd is None else cwd
    out: dict[str, Any] = {}

    def walk(obj: Any, prefix: str, depth: int) -> None:
        for name in _names(obj, depth == 0):
            try:
                value = getattr(obj, name)
            except Exception as err:  # noqa: BLE001  (a property that fails: recorded, not fatal)
                value = f"<error {err}>"
            key = prefix + name
            if dataclasses.is_dataclass(value) and not isinstance(value, type) and depth < MAX_DEPTH:
                out[f"{key}.__class__"] = f"{type(value).__module__}.{type(value).__qualname__}"
                walk(value, key + ".", depth + 1)
            elif name == "env_vars" and isinstance(value, dict):
                for var, v in value.items():
                    out[f"{key}.{var}"] = plain(v, cwd)
            else:
                out[key] = plain(value, cwd)

    walk(container, "", 0)
    return out


def expand_layout(value: Any) -> Any:
    """A pipeline layout in one encoding: Megatron-Core's list of stages (``[["embedding", "decoder"], ...]``) or its
    string form (``"Et*4|(t*4|)*14tL"``) -> the list of stage strings with repeats expanded (``["Etttt", ...]``).
    Other values are returned unchanged. Grammar: megatron-core 0.19.2 ``transformer/pipeline_parallel_layer_layout.py``
    (``E`` embedding, ``t`` decoder layer, ``m`` MTP layer, ``L`` loss, ``|`` stage boundary, ``x*n`` / ``(..)*n``).
    """
    import re

    if isinstance(value, list) and all(isinstance(s, list) for s in value):
        abbrev = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
        return ["".join(abbrev.get(x, x) for x in stage) for stage in value]
    if not isinstance(value, str):
        return value
    s = value
    while "(" in s:
        s = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    s = re.sub(r"([EtmL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    return s.rstrip("|").split("|")


def layout_string(stages: list[list[str]]) -> str:
    """Megatron-Core's list-of-stages layout as its compact string form: runs of one layer type written ``t*4``,
    repeated stages ``(t*4|)*14``; e.g. Kimi K2's PP4 VP4 layout
    ``[["embedding"] + ["decoder"] * 4] + [["decoder"] * 4] * 14 + [["decoder", "loss"]]`` -> ``"Et*4|(t*4|)*14tL"``.
    :func:`expand_layout` inverts it."""
    import itertools

    def stage(s: str) -> str:
        return "".join(
            c if len(g) == 1 else f"{c}*{len(g)}" for c, g in ((c, list(g)) for c, g in itertools.groupby(s))
        )

    parts = []
    expanded = expand_layout(stages)
    for s, group in ((s, list(g)) for s, g in itertools.groupby(expanded)):
        parts.append(stage(s) + "|" if len(group) == 1 else f"({stage(s)}|)*{len(group)}")
    text = "".join(parts)
    return text[:-1] if text.endswith("|") else text
