"""Optimizer-step benchmark: time ONE optimizer step of real Muon against AdamW on the model's real Muon matrices.

A job payload (``python -m bridgebench.payloads.optstep --config <resolved config.yaml> --out <dir>``) that runs on
any node: a
GPU when one is visible (``--device auto``), else the CPU. It allocates the matrices that Muon orthogonalizes
(:func:`bridgebench.model.newton_schulz.muon_matrices`, full unsharded shapes, no TP) for a subset of the model,
fills their
gradients with random values and, per matrix family (``attention``, ``mlp_dense``, ``router``, ``expert``,
``shared_expert``), measures:

- ``muon_step_s`` (s): one ``step()`` of Megatron-Core 0.19.2's ``TensorParallelMuon``
  (``megatron/core/optimizer/emerging_optimizers.py``) -- the class Megatron-Core builds for ``muon`` and
  ``dist_muon`` (the layer-wise optimizer wraps it; with one process it is this class alone). It subclasses
  emerging-optimizers 0.3.0 ``OrthogonalizedOptimizer`` (``orthogonalized_optimizers/orthogonalized_optimizer.py``:
  decoupled weight decay, momentum EMA, optional Nesterov, update ``p -= lr * scale * NS(momentum)``) and adds the
  fused-QKV split (``muon_split_qkv``: the fused ``linear_qkv`` parameter is split per query group into Q, [gate,]
  K, V and each piece orthogonalized alone). Its kwargs are made from the run's ``optimizer.*`` keys by
  Megatron-Core's own ``_muon_config_to_kwargs`` on a Megatron-Core ``OptimizerConfig``; with no process groups
  (``pg_collection=None``) every matrix goes to ``muon_utils.newton_schulz_tp(partition_dim=None)`` ->
  ``muon_utils.newton_schulz``, i.e. single-process blockwise orthogonalization of the whole (unsharded) matrix.
- ``adamw_step_s`` (s): one ``step()`` of ``torch.optim.AdamW`` (``fused=True`` where the device supports it, else
  ``foreach=True``) with the run's ``lr``, ``adam_beta1/2``, ``adam_eps``, ``weight_decay`` on the same parameters.
- ``ns_time_s`` (s): the Newton-Schulz orthogonalization alone -- emerging-optimizers 0.3.0
  ``orthogonalized_optimizers/muon_utils.py::newton_schulz`` on one fp32 matrix per Muon matrix (QKV pieces
  separately when split), same ``muon_num_ns_steps`` and ``muon_coefficient_type``, inside
  ``emerging_optimizers.utils.fp32_matmul_precision(prec)`` exactly as the optimizer calls it, where ``prec`` is
  the precision this run uses (:func:`matmul_precision`): the recipe's ``muon_fp32_matmul_prec`` on a GPU
  (``medium`` = BF16 tensor-core matmuls with FP32 I/O), ``highest`` (IEEE FP32) on a CPU.
- ``ns_flops`` (FLOPs): ``bridgebench.model.newton_schulz.ns_flops(rows, cols, muon_num_ns_steps, "gemm")`` summed
over the
  family's matrices (``steps * (4 m^2 n + 2 m^3)``, ``m = min(rows, cols)``; GEMM because ``TensorParallelMuon``
  never enables the SYRK kernel); ``ns_flops_per_s`` (FLOP/s) = ``ns_flops / ns_time_s``.
- ``ratio`` = ``muon_step_s / adamw_step_s``; ``matrices`` = Muon matrices (QKV pieces counted separately, as in
  ``muon_matrices``); ``params`` = elements of the family's parameters.

Each time is the median (``statistics.median``) of ``repeats`` timed calls (``time.perf_counter``, with
``torch.cuda.synchronize()`` before and after on CUDA) after ``warmup`` untimed ones (the first step allocates the
optimizer state; with ``--warmup 0`` that allocation is inside the first timed step). ``total`` sums the families
(both optimizers loop over parameters, so a step over all of them is the sum; its ``ratio`` and ``ns_flops_per_s``
are recomputed from the sums). The timed calls themselves are kept too, in timing order: ``muon_step_times_s``,
``adamw_step_times_s``, ``ns_times_s`` (s) per family, and in ``total`` repeat i of every family summed -- the
per-iteration series ``bridgebench compare`` resamples.

Subset (so the run fits the node): ``--layers N`` takes the first N decoder layers **of each MLP kind** (dense and
MoE) -- for a model whose layers are all one kind (Qwen3 30B-A3B) that is exactly the first N layers; Kimi K2 /
DeepSeek-V3 (first layer(s) dense) get layer 0 and the first MoE layer, so every family is measured. ``--experts K``
keeps the first K routed experts of each MoE layer. MTP layers are not included. ``--families`` narrows further.
Only ``--dtype fp32`` runs: Megatron steps FP32 main parameters, and ``newton_schulz`` rejects other dtypes.

Matmul precision on a CPU: torch computes FP32 matmuls at precision ``medium`` through BF16, which only CPUs with
native BF16 instructions (AVX512_BF16, AMX) run fast. Measured with ``benchmarks/bench_cpu_matmul.py`` (emerging-
optimizers ``newton_schulz``, 768x2048 FP32, 5 steps, one thread, load 1.0): 1.3 GFLOP/s at ``medium`` against 88-95
GFLOP/s at ``high`` / ``highest`` on an AMD EPYC held to AVX2 (oneDNN, MKL and ATen), 190 vs 89-99 GFLOP/s on the same
CPU with its AVX512_BF16. So on a CPU the payload runs ``highest`` (the recipe's precision is a GPU setting) unless
``--fp32-matmul-prec recipe`` asks for the recipe's; the result records both and why they differ
(``fp32_matmul_prec``, ``recipe_fp32_matmul_prec``, ``fp32_matmul_prec_reason``).

Load: ``load`` = other processes' CPU share over the whole timing window
(:mod:`bridgebench.payloads.cpu_contention`), so a timing taken under contention says so (``bridgebench report``
flags and sets it aside).

Output: ``<out>/optstep.json`` (written atomically: temp file + ``os.replace``) and one stdout line
``BRIDGEBENCH_OPTSTEP <compact json>`` (read by ``launch/collect.py``); before it, one Megatron-LM-style iteration
line per timed Muon step (:class:`IterationLines`: live figures for ``bridgebench status``, a series for
``collect``); progress goes to stderr. Defaults for
``--layers``, ``--experts`` and ``--repeats`` come from the config's ``job.*`` keys when present.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import typer

from bridgebench.payloads.cpu_contention import LoadProbe
from bridgebench.payloads.markers import OPTSTEP
from bridgebench.payloads.optstep_setup import (  # noqa: F401  (selected_layers re-exported for callers)
    OptstepError,
    ParamSpec,
    adamw_settings,
    group_params,
    job_default,
    load_config,
    muon_settings,
    select_matrices,
    selected_layers,
)

#: Families in report order (``bridgebench.model.newton_schulz.MuonMatrix.family``; ``mtp`` is never selected).
FAMILY_ORDER = ("attention", "mlp_dense", "router", "expert", "shared_expert")
#: The result line (payloads/markers.py).
MARKER = OPTSTEP
_METRICS = ("muon_step_s", "adamw_step_s", "ratio", "ns_time_s", "ns_flops", "ns_flops_per_s")
#: Per-repeat times (s), in timing order, kept beside their medians (``bridgebench compare`` resamples them).
_SERIES = ("muon_step_times_s", "adamw_step_times_s", "ns_times_s")


# ---------------------------------------------------------------------------------------------------- timing
def _timer(device) -> Callable[..., list[float]]:
    import torch

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def run(
        fn: Callable[[], Any], warmup: int, repeats: int, on_repeat: Callable[[float], None] | None = None
    ) -> list[float]:
        for _ in range(warmup):
            fn()
        sync()
        times = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
            if on_repeat is not None:
                on_repeat(times[-1])
        return times

    return run


class IterationLines:
    """Prints one Megatron-LM-style iteration line per timed Muon step on stdout, so the job's log shows live
    figures (``bridgebench status`` / ``logs follow``) and ``collect`` gets a per-step series::

        [2026-11-23 12:00:00] iteration        3/      10 | elapsed time per iteration (ms): 1234.5 |
        number of skipped iterations:   0 | number of nan iterations:   0 |

    (one physical line; the form of Megatron-LM ``core_v0.19.0`` ``training_log``, see
    :mod:`bridgebench.logs.formats`).  Iterations count the timed Muon steps over all families (``total`` =
    families x repeats); AdamW and Newton-Schulz timings are not printed as iterations.
    """

    def __init__(self, total: int, stream=None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream

    def __call__(self, seconds: float) -> None:
        from datetime import datetime

        self.done += 1
        out = self.stream or sys.stdout
        out.write(
            f" [{datetime.now().strftime('%Y-%m-%d %H:%M:%S')}] iteration {self.done:8d}/{self.total:8d} |"
            f" elapsed time per iteration (ms): {seconds * 1000.0:.1f} |"
            " number of skipped iterations:   0 | number of nan iterations:   0 |\n"
        )
        out.flush()


def _adamw(params, device, kwargs):
    """torch.optim.AdamW, fused where the device supports it, else foreach; returns (optimizer, impl name)."""
    import torch

    try:
        return torch.optim.AdamW(params, fused=True, **kwargs), "fused"
    except RuntimeError:
        return torch.optim.AdamW(params, foreach=True, **kwargs), "foreach"


def _with_ratios(d: dict[str, Any]) -> dict[str, Any]:
    d["ratio"] = d["muon_step_s"] / d["adamw_step_s"] if d["adamw_step_s"] > 0 else None
    d["ns_flops_per_s"] = d["ns_flops"] / d["ns_time_s"] if d["ns_time_s"] > 0 else None
    return d


def time_family(
    specs: Sequence[ParamSpec],
    *,
    device,
    muon_kwargs: dict[str, Any],
    adamw_kwargs: dict[str, Any],
    warmup: int,
    repeats: int,
    generator,
    on_muon_step: Callable[[float], None] | None = None,
) -> tuple[dict[str, Any], str]:
    """Time one family: Muon step, AdamW step (same parameters and random gradients), NS alone.

    Returns ``(figures, adamw_impl)``; figures are seconds (medians), FLOPs and FLOP/s (see the module docstring).
    """
    import torch
    from emerging_optimizers.orthogonalized_optimizers.muon_utils import newton_schulz
    from emerging_optimizers.utils import fp32_matmul_precision
    from megatron.core.optimizer.emerging_optimizers import TensorParallelMuon

    from bridgebench.model.newton_schulz import ns_flops

    timed = _timer(device)
    steps, coeff = muon_kwargs["num_ns_steps"], muon_kwargs["coefficient_type"]

    def randn(rows: int, cols: int, scale: float = 1.0):
        x = torch.randn(rows, cols, generator=generator, dtype=torch.float32)
        return (x.mul_(scale) if scale != 1.0 else x).to(device)

    params = []
    for s in specs:
        p = torch.nn.Parameter(randn(s.rows, s.cols, 0.02))
        p.grad = randn(s.rows, s.cols)
        if s.is_qkv:
            p.is_qkv = True  # Megatron-Core sets this on the fused linear_qkv weight (tensor_parallel/layers.py)
        params.append(p)

    muon = TensorParallelMuon(params, **muon_kwargs)
    muon_t = timed(muon.step, warmup, repeats, on_muon_step)
    del muon
    adamw, impl = _adamw(params, device, adamw_kwargs)
    adamw_t = timed(adamw.step, warmup, repeats)
    del adamw, params

    pieces = [m for s in specs for m in s.pieces]
    xs = [randn(m.rows, m.cols) for m in pieces]

    def ns_all() -> None:
        with fp32_matmul_precision(muon_kwargs["fp32_matmul_prec"]):
            for x in xs:  # noqa: F821  (xs is deleted after timing, not before)
                newton_schulz(x, steps=steps, coefficient_type=coeff)

    ns_t = timed(ns_all, warmup, repeats)
    del xs
    figures = {
        "matrices": len(pieces),
        "params": sum(s.rows * s.cols for s in specs),
        "muon_step_s": statistics.median(muon_t),
        "adamw_step_s": statistics.median(adamw_t),
        "ns_time_s": statistics.median(ns_t),
        "ns_flops": sum(ns_flops(m.rows, m.cols, steps, "gemm") for m in pieces),
        "muon_step_times_s": muon_t,
        "adamw_step_times_s": adamw_t,
        "ns_times_s": ns_t,
    }
    return _with_ratios(figures), impl


def _versions() -> dict[str, Optional[str]]:
    import importlib.metadata as md

    import torch

    out: dict[str, Optional[str]] = {"torch": torch.__version__}
    for key, dist in (("emerging_optimizers", "emerging-optimizers"), ("megatron_core", "megatron-core")):
        try:
            out[key] = md.version(dist)
        except md.PackageNotFoundError:
            out[key] = None
    return out


def resolve_device(device: str):
    """``auto`` -> ``cuda`` if available else ``cpu``; ``cuda``/``cuda:N``/``cpu`` as given.

    Raises:
        OptstepError: CUDA asked for but not available, or an unknown device string.
    """
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise OptstepError(f"unknown device {device!r}: {err}") from err
    if dev.type not in ("cpu", "cuda"):
        raise OptstepError(f"device must be auto, cpu or cuda[:N], got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise OptstepError(f"device {device!r} requested but CUDA is not available on {socket.gethostname()}")
    return dev


MATMUL_PRECISIONS = ("auto", "recipe", "highest", "high", "medium")


def matmul_precision(device_type: str, recipe: str, choice: str = "auto") -> tuple[str, Optional[str]]:
    """The FP32 matmul precision (torch ``set_float32_matmul_precision`` value) Muon and Newton-Schulz run at.

    Args:
        device_type: ``"cpu"`` or ``"cuda"``.
        recipe: the run's ``muon_fp32_matmul_prec`` (Megatron-Core ``OptimizerConfig``; the perf recipes use
            ``medium``).
        choice: ``auto`` (the recipe's on a GPU, ``highest`` on a CPU), ``recipe`` (always the recipe's), or a
            precision to force.

    Returns:
        ``(precision, reason)``; ``reason`` is None when the precision is the recipe's, else one sentence why not.

    Raises:
        OptstepError: an unknown ``choice``.

    Source of the CPU rule: ``benchmarks/bench_cpu_matmul.py`` (module docstring: 1.3 vs 88-95 GFLOP/s on an
    AVX2-only CPU) -- torch routes ``medium`` FP32 matmuls through BF16, native only on AVX512_BF16/AMX CPUs.
    """
    if choice not in MATMUL_PRECISIONS:
        raise OptstepError(f"--fp32-matmul-prec must be one of {', '.join(MATMUL_PRECISIONS)}, got {choice!r}")
    if choice == "recipe" or (choice == "auto" and device_type != "cpu"):
        return recipe, None
    if choice == "auto":
        if recipe == "highest":
            return recipe, None
        return "highest", (
            f"CPU run: the recipe's muon_fp32_matmul_prec={recipe!r} is a GPU setting; on a CPU torch computes "
            "'medium' FP32 matmuls through BF16, which CPUs without native BF16 (AVX2-only) run ~70x slower, so "
            "the CPU runs IEEE FP32 ('highest')"
        )
    return choice, (None if choice == recipe else f"forced by --fp32-matmul-prec {choice}")


def run_optstep(
    cfg,
    out_dir: Path | str,
    *,
    layers: int = 1,
    experts: int = 2,
    families: Optional[Sequence[str]] = None,
    dtype: str = "fp32",
    device: str = "auto",
    warmup: int = 1,
    repeats: int = 5,
    seed: int = 0,
    fp32_matmul_prec: str = "auto",
    progress: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """Run the benchmark on a composed config; write ``<out_dir>/optstep.json`` atomically, print the
    ``BRIDGEBENCH_OPTSTEP`` line on stdout, and return the result dict.

    Raises:
        OptstepError: bad subset, dtype, device or optimizer settings (nothing is written then).
        bridgebench.config.ConfigError: the config's model section breaks a rule.
    """
    from omegaconf import OmegaConf

    from bridgebench.config.compose import model_spec

    _check_args(dtype, warmup, repeats)
    model = model_spec(cfg)
    optimizer = OmegaConf.to_container(cfg.optimizer, resolve=True)
    muon_kwargs = muon_settings(optimizer, model)
    mats = select_matrices(
        model, layers=layers, experts=experts, split_qkv=bool(muon_kwargs["split_qkv"]), families=families
    )
    dev = resolve_device(device)
    recipe_prec = str(muon_kwargs["fp32_matmul_prec"])
    ran_prec, prec_reason = matmul_precision(dev.type, recipe_prec, fp32_matmul_prec)
    muon_kwargs["fp32_matmul_prec"] = ran_prec

    import torch

    specs = group_params(mats)
    present = [f for f in FAMILY_ORDER if any(s.family == f for s in specs)]
    load = LoadProbe.start()  # other processes' CPU share over the timing window (payloads/cpu_contention.py)
    fams, impl = _time_families(specs, present, dev, muon_kwargs, optimizer, warmup, repeats, seed, progress)
    load.stop()
    total = _step_total(fams)
    result = {
        "kind": "optstep",
        "model": model.name,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "device_type": dev.type,
        "threads": torch.get_num_threads(),
        "dtype": "fp32",
        "layers": layers,
        "layer_indices": sorted({m.layer for m in mats}),
        "experts": experts,
        "warmup": warmup,
        "repeats": repeats,
        "optimizer": str(optimizer.get("optimizer")),
        "muon_class": "megatron.core.optimizer.emerging_optimizers.TensorParallelMuon",
        "adamw_impl": impl,
        "num_ns_steps": int(muon_kwargs["num_ns_steps"]),
        "coefficient_type": str(muon_kwargs["coefficient_type"]),
        "fp32_matmul_prec": ran_prec,
        "recipe_fp32_matmul_prec": recipe_prec,
        "fp32_matmul_prec_reason": prec_reason,
        "split_qkv": bool(muon_kwargs["split_qkv"]),
        "ns_kernel_counted": "gemm",
        "families": {f: {k: fams[f][k] for k in ("matrices", "params", *_METRICS, *_SERIES)} for f in present},
        "total": {k: total[k] for k in ("matrices", "params", *_METRICS, *_SERIES)},
        "load": load.result(),
        "versions": _versions(),
        "config_hash": os.environ.get("BRIDGEBENCH_CONFIG_HASH") or None,
        "slurm_job_id": os.environ.get("SLURM_JOB_ID") or None,
        "node": socket.gethostname(),
    }
    _publish(result, Path(out_dir))
    return result


def _check_args(dtype: str, warmup: int, repeats: int) -> None:
    """Raises OptstepError for a dtype other than FP32 or a negative warmup / non-positive repeats."""
    if dtype not in ("fp32", "float32"):
        raise OptstepError(
            f"dtype {dtype!r} is not supported: emerging-optimizers 0.3.0 newton_schulz needs float32 "
            "input and Megatron steps FP32 main parameters; use fp32"
        )
    if isinstance(warmup, bool) or warmup < 0 or isinstance(repeats, bool) or repeats < 1:
        raise OptstepError(f"warmup must be >= 0 and repeats >= 1, got warmup={warmup}, repeats={repeats}")


def _time_families(
    specs: list,
    present: list[str],
    dev,
    muon_kwargs: dict,
    optimizer: dict,
    warmup: int,
    repeats: int,
    seed: int,
    progress: Callable[[str], None],
) -> tuple[dict[str, dict[str, Any]], Any]:
    """Time Muon and AdamW (``optimizer``: the config's section) on each family of ``present`` in turn
    (:func:`time_family`; parameters and gradients from one generator seeded with ``seed``, one iteration line per
    Muon step); returns the per-family results and the AdamW implementation used."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    lines = IterationLines(len(present) * repeats)
    fams: dict[str, dict[str, Any]] = {}
    impl = None
    for fam in present:
        fam_specs = [s for s in specs if s.family == fam]
        progress(f"optstep: {fam}: {sum(len(s.pieces) for s in fam_specs)} matrices on {dev} ...")
        fams[fam], impl = time_family(
            fam_specs,
            device=dev,
            muon_kwargs=muon_kwargs,
            adamw_kwargs=adamw_settings(optimizer),
            warmup=warmup,
            repeats=repeats,
            generator=gen,
            on_muon_step=lines,
        )
        f = fams[fam]
        progress(
            f"optstep: {fam}: Muon {f['muon_step_s']:.4g} s, AdamW {f['adamw_step_s']:.4g} s, "
            f"NS {f['ns_time_s']:.4g} s ({(f['ns_flops_per_s'] or 0) / 1e9:.1f} GFLOP/s)"
        )
    return fams, impl


def _step_total(fams: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The whole step: every family's counts and times summed (ratios recomputed), repeat ``i`` of each series the
    sum of every family's repeat ``i``."""
    total: dict[str, Any] = defaultdict(float)
    for f in fams.values():
        for key in ("matrices", "params", "muon_step_s", "adamw_step_s", "ns_time_s", "ns_flops"):
            total[key] += f[key]
    total = _with_ratios({k: (int(v) if k in ("matrices", "params", "ns_flops") else v) for k, v in total.items()})
    for key in _SERIES:  # repeat i of a whole step = the sum of every family's repeat i
        total[key] = [sum(times) for times in zip(*(f[key] for f in fams.values()))]
    return total


def _publish(result: dict[str, Any], out: Path) -> None:
    """Write ``<out>/optstep.json`` atomically and print the ``BRIDGEBENCH_OPTSTEP`` line on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".optstep.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, out / "optstep.json")
    sys.stdout.write(MARKER + json.dumps(result, separators=(",", ":")) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------------- CLI
# rich_markup_mode=None: plain one-line click errors (``Error: Invalid value for '--layers' ...``), easy to find in
# job logs, instead of rich's boxed and wrapped messages.
app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Time one optimizer step of Muon vs AdamW on a model's Muon matrices (see launch/optstep.py).",
)


@app.command()
def main(
    config: Path = typer.Option(
        ...,
        "--config",
        exists=True,
        file_okay=True,
        dir_okay=False,
        readable=True,
        help="composed bridgebench config.yaml (as `bridgebench plan` writes it)",
    ),
    out: Path = typer.Option(..., "--out", help="output directory for optstep.json"),
    layers: Optional[int] = typer.Option(
        None, "--layers", min=1, help="decoder layers of each MLP kind (default: job.layers or 1)"
    ),
    experts: Optional[int] = typer.Option(
        None, "--experts", min=1, help="routed experts per MoE layer (default: job.experts or 2)"
    ),
    families: Optional[str] = typer.Option(None, "--families", help=f"comma-separated subset of {FAMILY_ORDER}"),
    dtype: str = typer.Option("fp32", "--dtype", help="parameter dtype (fp32 only; see module docstring)"),
    device: str = typer.Option("auto", "--device", help="auto (cuda if available else cpu), cpu, cuda[:N]"),
    warmup: int = typer.Option(1, "--warmup", min=0, help="untimed calls before timing"),
    repeats: Optional[int] = typer.Option(None, "--repeats", min=1, help="timed calls (default: job.repeats or 5)"),
    seed: int = typer.Option(0, "--seed", help="seed of the random parameters and gradients"),
    fp32_matmul_prec: str = typer.Option(
        "auto",
        "--fp32-matmul-prec",
        help="auto (the recipe's on a GPU, highest on a CPU), recipe, highest, high or medium",
    ),
) -> None:
    """Write <out>/optstep.json and print one BRIDGEBENCH_OPTSTEP line."""
    from bridgebench.payloads.markers import announce_start

    announce_start("optstep")  # before the heavy imports: collect tells a payload that never started (markers.py)
    from bridgebench.config.compose import ConfigError

    try:
        cfg = load_config(config)
        fam_list = [f.strip() for f in families.split(",") if f.strip()] if families else None
        run_optstep(
            cfg,
            out,
            layers=layers if layers is not None else job_default(cfg, "layers", 1),
            experts=experts if experts is not None else job_default(cfg, "experts", 2),
            families=fam_list,
            dtype=dtype,
            device=device,
            warmup=warmup,
            repeats=repeats if repeats is not None else job_default(cfg, "repeats", 5),
            seed=seed,
            fp32_matmul_prec=fp32_matmul_prec,
            progress=lambda s: typer.echo(s, err=True),
        )
    except (OptstepError, ConfigError) as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from None


if __name__ == "__main__":
    app()
