"""The tables the replay payload replays: published ablation sets (``paths.ablations/<set_id>.csv``, the layout of
../shared/reference/ablations/README.md: one row per measured configuration), looked up by a composed run's
configuration when the run is planned (:func:`lookup`).

A row matches a run when every parallel and batch size the row states equals the run's: GPU (the row's ``gpu`` text
names it: A100, H100, B200, GB200), precision class (``bf16`` / "mixed precision" -> bf16; ``fp8`` / Float8 ->
the FP8 family, MXFP8 apart), GPU count, TP, PP, VP (empty or 1 = none), CP, EP (empty = 1), MBS, GBS, and the
architecture's layers, hidden size and sequence length (where stated). The row's figure becomes a step time (s):
``s/step`` as is; ``tokens/s/GPU`` -> GBS x sequence / (value x GPUs); ``TFLOP/s/GPU`` -> the run's model FLOPs per
step (Megatron-Bridge's formula of its release, :func:`bridgebench.config.run_flops.step_flops`) / (value x GPUs x
1e12). A row whose ``measured_value`` is empty and whose notes say it did not fit (``OOM``, ``out of memory``,
``did not fit``) is an out-of-memory row.
"""

from __future__ import annotations

import csv
import hashlib
import re
from pathlib import Path
from typing import Any

from bridgebench.errors import BridgebenchError


class ReplayTableError(BridgebenchError):
    """A replay table that is missing or unreadable (rule ``replay_table``); the message names the file."""


_OOM = re.compile(r"\b(OOM|out of memory|did not fit|does not fit)\b", re.IGNORECASE)


def _int(text: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def gpu_name(text: str) -> str | None:
    """``configs/gpu`` name of a row's GPU text (``"H100-SXM-80GB (DGX H100 ...)"`` -> ``h100``), None if unknown."""
    t = (text or "").upper()
    for key, name in (("GB300", "gb300"), ("GB200", "gb200"), ("B300", "b300"), ("B200", "b200"), ("H200", "h200"),
                      ("H100", "h100"), ("A100", "a100")):  # fmt: skip
        if key in t:
            return name
    return None


def precision_class(text: str) -> str:
    """``bf16``, ``fp8`` (FP8 current / delayed scaling, Float8) or ``mxfp8`` / ``nvfp4`` of a precision text or a
    ``configs/precision`` name (``fp8_cs`` -> ``fp8``)."""
    t = (text or "").lower()
    for keys, name in ((("mxfp8",), "mxfp8"), (("nvfp4",), "nvfp4"), (("fp8", "float8"), "fp8")):  # first match wins
        if any(k in t for k in keys):
            return name
    return "bf16"


def table_path(folder: Path, set_id: str) -> Path:
    """``<folder>/<set_id>.csv``.

    Raises:
        ReplayTableError: a set id that is not a plain file name, or no such file.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", set_id or "") or set_id.startswith("."):
        raise ReplayTableError(f"replay_table: job.replay.table must name a set (a CSV file name), got {set_id!r}")
    path = Path(folder) / f"{set_id}.csv"
    if not path.is_file():
        known = sorted(p.stem for p in Path(folder).glob("*.csv")) if Path(folder).is_dir() else []
        raise ReplayTableError(
            f"replay_table: no table {path} (paths.ablations, BRIDGEBENCH_ABLATIONS); known: {known or 'none'}"
        )
    return path


def read_table(path: Path) -> tuple[list[dict[str, str]], str]:
    """The rows of one table and the file's sha256."""
    data = Path(path).read_bytes()
    rows = list(csv.DictReader(data.decode("utf-8").splitlines()))
    return rows, hashlib.sha256(data).hexdigest()


def _want(cfg) -> dict[str, Any]:
    m = cfg.model
    vp = m.virtual_pipeline_model_parallel_size
    return {
        "gpu": str(cfg.gpu.name),
        "precision": precision_class(str(cfg.precision.name)),
        "num_gpus": int(cfg.num_gpus),
        "tp": int(m.tensor_model_parallel_size),
        "pp": int(m.pipeline_model_parallel_size),
        "vp": int(vp) if vp and int(vp) > 1 else None,
        "cp": int(m.context_parallel_size),
        "ep": int(m.expert_model_parallel_size or 1),
        "mbs": int(cfg.train.micro_batch_size),
        "gbs": int(cfg.train.global_batch_size),
        "num_layers": int(m.num_layers),
        "hidden_size": int(m.hidden_size),
        "seq_length": int(m.seq_length),
    }


def _have(r: dict[str, str]) -> dict[str, Any]:
    vp = _int(r.get("vp"))
    return {
        "gpu": gpu_name(r.get("gpu", "")),
        "precision": precision_class(r.get("precision", "")),
        "num_gpus": _int(r.get("num_gpus")),
        "tp": _int(r.get("tp")) or 1,
        "pp": _int(r.get("pp")) or 1,
        "vp": vp if vp and vp > 1 else None,
        "cp": _int(r.get("cp")) or 1,
        "ep": _int(r.get("ep")) or 1,
        "mbs": _int(r.get("mbs")),
        "gbs": _int(r.get("gbs")),
        "num_layers": _int(r.get("num_layers")),
        "hidden_size": _int(r.get("hidden_size")),
        "seq_length": _int(r.get("seq_length")),
    }


def lookup(cfg, folder: Path) -> dict[str, Any] | None:
    """The replay row of a composed run (``cfg.job.replay.table`` in ``folder``), or None when the table has no row
    for its configuration. The row carries ``set_id``, ``source``, ``row`` (1-based data row), ``file_sha256``,
    ``measured_metric`` / ``measured_value`` / ``measured_unit`` as printed, ``status`` (``measured`` or ``oom``),
    ``step_time_s`` (None for an OOM row), ``step_time_from`` (how it was derived), ``flops_per_step`` (the run's
    model FLOPs per step) and ``notes``.

    Raises:
        ReplayTableError: no table set, a missing file, or a row figure in a unit the payload cannot replay.
    """
    from bridgebench.config.compose import run_facts
    from bridgebench.config.run_flops import step_flops

    set_id = cfg.job.replay.table
    if not set_id:
        raise ReplayTableError(
            "replay_table: job.replay.table is not set (an ablation set id, e.g. job.replay.table=...)"
        )
    path = table_path(folder, str(set_id))
    rows, sha = read_table(path)
    want = _want(cfg)
    flops = float(step_flops(run_facts(cfg)).total)
    for i, r in enumerate(rows, 1):
        have = _have(r)
        if any(have[k] is not None and have[k] != v for k, v in want.items() if k not in ("vp",)) or (
            have["vp"] != want["vp"]
        ):
            continue
        if any(have[k] is None for k in ("gpu", "num_gpus", "mbs", "gbs")):
            continue
        value = (r.get("measured_value") or "").strip()
        unit = (r.get("measured_unit") or "").strip()
        out = {
            "set_id": str(set_id),
            "source": r.get("source", ""),
            "row": i,
            "file_sha256": sha,
            "measured_metric": r.get("measured_metric", ""),
            "measured_value": value,
            "measured_unit": unit,
            "flops_per_step": flops,
            "notes": r.get("notes", ""),
        }
        if not value:
            if _OOM.search(r.get("notes", "")):
                return out | {"status": "oom", "step_time_s": None, "step_time_from": "the table: did not fit"}
            continue
        v = float(value)
        if unit in ("s/step", "s"):
            step, how = v, "s/step as printed"
        elif unit == "tokens/s/GPU":
            step, how = want["gbs"] * want["seq_length"] / (v * want["num_gpus"]), "GBS x seq / (tokens/s/GPU x GPUs)"
        elif unit == "TFLOP/s/GPU":
            step, how = flops / (v * 1e12 * want["num_gpus"]), "model FLOPs per step / (TFLOP/s/GPU x GPUs)"
        else:
            raise ReplayTableError(f"replay_table: {path} row {i}: unit {unit!r} is not a step (s/step, tokens/s/GPU, "
                                   "TFLOP/s/GPU)")  # fmt: skip
        return out | {"status": "measured", "step_time_s": step, "step_time_from": how}
    return None


def describe(cfg) -> str:
    """The configuration a lookup matched on, for messages."""
    w = _want(cfg)
    return " ".join(f"{k}={v}" for k, v in w.items())
