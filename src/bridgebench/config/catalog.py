"""The shipped catalogue of GPUs, precisions and models (``configs/gpu``, ``configs/precision``, ``configs/model``),
read as plain YAML without composing a run. One place maps a spelling (``FP8-MX``, ``MXFP8``, ``mxfp8``) to its
precision and peak key, and a published system or model name to bridgebench's.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from bridgebench.errors import BridgebenchError
from bridgebench.model.mfu import PeakError
from bridgebench.paths import CONFIG_DIR, config_dirs, config_files


class CatalogError(BridgebenchError):
    """An unknown GPU, precision or model name."""


def options(group: str) -> list[str]:
    """Option names of a config group over the config search path (``configs/<group>/*.yaml``,
    ``$BRIDGEBENCH_CONFIG_DIR/<group>/*.yaml``), sorted."""
    return sorted(config_files(group))


def _load(group: str, name: str) -> dict[str, Any]:
    return _load_from(group, name, config_dirs())


@functools.cache
def _load_from(group: str, name: str, dirs: tuple[Path, ...]) -> dict[str, Any]:
    """One option's YAML (cached per config search path).

    Raises:
        CatalogError: the file is not valid YAML or not a mapping.
    """
    path = config_files(group)[name]
    if not path.is_relative_to(CONFIG_DIR):  # a user file: bounded before it is parsed (config/bounds.py)
        from bridgebench.config.bounds import BoundsError, check_confined, check_yaml_file

        try:
            check_confined(path, path.parent.parent)
            check_yaml_file(path)
        except BoundsError as err:
            raise CatalogError(str(err)) from None
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise CatalogError(f"bad_yaml: {path} is not valid YAML: {str(err).splitlines()[0]}") from err
    if not isinstance(data, dict):
        raise CatalogError(f"bad_yaml: {path} must hold a mapping, got {type(data).__name__}")
    return data.get(group, data) if group == "precision" else data


def load_gpu(name: str) -> dict[str, Any]:
    """The GPU facts of ``configs/gpu/<name>.yaml`` (peaks in TFLOP/s, ``gpus_per_node``, ``nvlink_domain``).

    Raises:
        PeakError: unknown GPU, listing the known ones (a :class:`CatalogError` too).
    """
    if name.lower() not in options("gpu"):
        raise UnknownGpuError(f"unknown gpu {name!r}; known: {options('gpu')}")
    return dict(_load("gpu", name.lower()))


class UnknownGpuError(PeakError, CatalogError):
    """No ``configs/gpu`` entry of that name."""


@functools.cache
def precision_names() -> dict[str, str]:
    """Every spelling (option name, its ``aliases``, lower-case forms) -> ``configs/precision`` option name."""
    out: dict[str, str] = {}
    for name in options("precision"):
        for spelling in [name, *_load("precision", name).get("aliases", [])]:
            out[spelling] = out[spelling.lower()] = name
    return out


def precision(spelling: str) -> dict[str, Any]:
    """The ``precision`` node of the option a spelling names (``FP8-MX`` -> mxfp8's: name, peak, recipe).

    Raises:
        CatalogError: an unknown spelling, listing the known ones.
    """
    names = precision_names()
    name = names.get(spelling) or names.get(str(spelling).lower())
    if name is None:
        raise CatalogError(f"unknown precision {spelling!r}; known: {sorted(set(names))}")
    return dict(_load("precision", name))


def peak_key(spelling: str) -> str:
    """The ``gpu.peak_tflops`` key of a precision spelling (``FP8-CS`` -> ``fp8``). Raises :class:`CatalogError`."""
    return str(precision(spelling)["peak"])


#: Values of ``release.published_rounding.*`` (``bridgebench.config.schema.PublishedRoundingSchema``).
ROUNDING_RULES = {
    "model_tflops_per_gpu": ("integer",),
    "tokens_per_sec_per_gpu": ("integer", "whole_sequences_per_job"),
}


def release_sort_key(name: str) -> tuple[int, ...]:
    """Order of NeMo container releases: numeric, component-wise (``25.11 < 26.02 < 26.02.01 < 26.04``).

    Raises:
        CatalogError: a name that is not dot-separated integers.
    """
    try:
        return tuple(int(p) for p in str(name).split("."))
    except ValueError:
        raise CatalogError(f"release {name!r} is not a NeMo release name like 26.04 or 26.04.01") from None


@functools.cache
def releases() -> dict[str, dict[str, Any]]:
    """Every ``configs/release/<name>.yaml`` by name, in release order (:func:`release_sort_key`).

    Raises:
        CatalogError: a ``published_rounding`` value that is not one of :data:`ROUNDING_RULES` (naming file and key).
    """
    out = {}
    for name in sorted(options("release"), key=release_sort_key):
        data = dict(_load("release", name))
        rounding = {"model_tflops_per_gpu": "integer", "tokens_per_sec_per_gpu": "integer"}
        rounding |= data.get("published_rounding") or {}
        for key, value in rounding.items():
            if value not in ROUNDING_RULES.get(key, ()):
                raise CatalogError(
                    f"configs/release/{name}.yaml: published_rounding.{key}={value!r}; "
                    f"allowed: {list(ROUNDING_RULES.get(key, ()))}"
                )
        data["published_rounding"] = rounding
        out[name] = data
    return out


def release(name: str) -> dict[str, Any]:
    """The facts of one release (``configs/release/<name>.yaml``).

    Raises:
        CatalogError: an unknown release, listing the known ones.
    """
    known = releases()
    if str(name) not in known:
        raise CatalogError(f"release {name!r} does not exist; known releases: {list(known)}")
    return known[str(name)]
