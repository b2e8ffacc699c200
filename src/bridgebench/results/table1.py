"""Reproduce the blog's Muon vs AdamW table (Table 1) from published measurements.

Runs: ``configs/experiment/table1.yaml`` (Kimi K2 and Qwen3 30B-A3B x AdamW and Muon, GB300, MXFP8). For each run the
step time comes from a published measurement, turned into seconds through the FLOPs model:

1. a row of NVIDIA's performance tables with the same model, system, precision, GPUs, GBS, MBS, parallelism and
   optimizer (Qwen3 30B-A3B AdamW: 26.02; Kimi K2 Muon: 26.02.01), ``step = GBS * seq / (tokens/s/GPU * GPUs)``
   -- an independent measurement, so model TFLOP/s/GPU is a real prediction checked against the blog;
2. otherwise the blog's own model TFLOP/s/GPU: ``step = FLOPs/step / (TFLOP/s/GPU * GPUs)`` (then model TFLOP/s/GPU
   equals the blog's by construction; the row says so in ``step_time_source``).

Newton-Schulz TFLOP/s/GPU = NS FLOPs per step per GPU (:mod:`bridgebench.model.newton_schulz`, policy from the run's
optimizer config and ``accounting.ns_kernel``) / step time. MFU against the BF16 and the MXFP8 dense peaks
(``configs/gpu``).
:func:`ns_policy_grid` reports, for each counting policy, the NS TFLOP/s/GPU both Muon runs would have, next to the
blog's 51 and 35, and whether one policy reproduces both within 5 %.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bridgebench.config.compose import RunFacts, compose, expand_sweep, run_facts
from bridgebench.config.run_flops import ns_policy, parallelism, step_flops
from bridgebench.model.mfu import mfu
from bridgebench.model.newton_schulz import NSPolicy, ns_load
from bridgebench.model.optimizer import family
from bridgebench.paths import load_paths
from bridgebench.results.outcomes import usable
from bridgebench.results.records import RunRecord, load_blog_table1, load_published

NS_TOLERANCE = 0.05


@dataclass(frozen=True, kw_only=True)
class Run:
    facts: RunFacts
    overrides: tuple[str, ...]

    @property
    def optimizer(self) -> str:
        return "muon" if self.facts.is_muon else "adamw"


def table1_runs(overrides: tuple[str, ...] = ()) -> list[Run]:
    """The composed runs of ``experiment=table1`` (plus any extra overrides), in sweep order."""
    return [
        Run(facts=run_facts(compose(ov)), overrides=tuple(ov)) for ov in expand_sweep(["experiment=table1", *overrides])
    ]


def flops_per_step(f: RunFacts) -> float:
    """Model FLOPs per optimizer step (GBS sequences), formula of the run's release."""
    return float(step_flops(f).total)


def matching_published(f: RunFacts, optimizer: str, records: list[RunRecord]) -> RunRecord | None:
    """The earliest published row (at or after the run's release) of the same configuration, or None."""
    p = parallelism(f)
    rel = str(f.release["name"])
    candidates = [
        r
        for r in records
        if r.model == f.model.name
        and r.system == f.gpu["name"]
        and r.precision == f.precision["name"]
        and r.num_gpus == f.num_gpus
        and r.gbs == f.global_batch_size
        and r.mbs == f.micro_batch_size
        and r.seq_length == f.model.seq_length
        and (r.tp or 1) == p.tp
        and (r.pp or 1) == p.pp
        and (r.ep or 1) == p.ep
        and r.optimizer == optimizer
        and _release_key(r.release) >= _release_key(rel)
    ]
    return min(candidates, key=lambda r: _release_key(r.release), default=None)


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def measured_step_times(
    records: list[dict], qualities: tuple[str, ...] = ("steady",)
) -> dict[tuple[str, str], tuple[float, str]]:
    """(model, adamw|muon) -> (step time s, record id) from the user's completed pretrain records (store) whose
    window quality is in ``qualities`` (default: only ``steady`` windows; records without a quality are never
    used). When several runs match, the most recently submitted one wins (``timestamps.submitted_utc``; SLURM job
    ids are not ordered across clusters)."""
    out: dict[tuple[str, str], tuple[float, str]] = {}
    when = lambda r: ((r.get("timestamps") or {}).get("submitted_utc") or "", r["record_id"])  # noqa: E731
    for r in sorted(records, key=when):
        if (
            r.get("kind") == "pretrain"
            and r.get("state") == "COMPLETED"
            and usable(r)  # outcome completed (results/outcomes.py): the payload ran and left its figures
            and r.get("step_time_s")
            and r.get("quality") in qualities
        ):
            opt = family(str(r.get("optimizer")))
            out[(r["model"], opt)] = (float(r["step_time_s"]), r["record_id"])
    return out


def reproduce(overrides: tuple[str, ...] = (), measured: dict | None = None) -> pd.DataFrame:
    """Table 1, one row per model x optimizer; see the module docstring for where each number comes from.

    ``measured`` (from :func:`measured_step_times`) replaces published step times with the user's own runs.

    Columns (TFLOP/s per GPU, MFU as fractions): model, optimizer, num_gpus, step_time_source, step_time_s,
    tokens_per_sec_per_gpu, model_tflops_per_gpu, newton_schulz_tflops_per_gpu, newton_schulz_tflops_per_gpu_busiest,
    total_tflops_per_gpu, mfu_bf16, mfu_precision, mfu_bf16_model_only, mfu_precision_model_only,
    published_model_tflops_per_gpu, published_newton_schulz_tflops_per_gpu, published_total_tflops_per_gpu,
    delta_model_pct, delta_newton_schulz_pct, delta_total_pct, flops_formula, ns_policy, peak_table_version.
    """
    blog = load_blog_table1().set_index(["model", "optimizer"])
    published = load_published()
    rows = []
    for run in table1_runs(overrides):
        f = run.facts
        pub = blog.loc[(f.model.name, run.optimizer)]
        flops = flops_per_step(f)
        tokens = f.global_batch_size * f.model.seq_length
        step, source, check = _step_time(f, run.optimizer, pub, published, measured, flops)
        model_tf = flops / step / f.num_gpus / 1e12
        ns_tf = ns_tf_max = 0.0
        policy_text = "-"
        if f.is_muon:
            policy = ns_policy(f)
            load = _ns_load(f.model, parallelism(f), policy)
            ns_tf, ns_tf_max = load.per_gpu_mean / step / 1e12, load.per_gpu_max / step / 1e12
            policy_text = _policy_text(policy)
        total = model_tf + ns_tf
        prec = f.precision["peak"]
        rows.append(
            {
                "model": f.model.name,
                "optimizer": run.optimizer,
                "num_gpus": f.num_gpus,
                "step_time_source": source,
                # what the row proves: "independent check" (a measurement the blog did not use: model TFLOP/s is a
                # prediction checked against the blog), "derived from the blog" (model TFLOP/s equal the blog's by
                # construction: only the NS figure and MFU are bridgebench's), or "your run"
                "check": check,
                "step_time_s": step,
                "tokens_per_sec_per_gpu": tokens / step / f.num_gpus,
                "model_tflops_per_gpu": model_tf,
                "newton_schulz_tflops_per_gpu": ns_tf,
                "newton_schulz_tflops_per_gpu_busiest": ns_tf_max,
                "total_tflops_per_gpu": total,
                "mfu_bf16": mfu(total, f.gpu, "bf16"),
                "mfu_precision": mfu(total, f.gpu, prec),
                "mfu_bf16_model_only": mfu(model_tf, f.gpu, "bf16"),
                "mfu_precision_model_only": mfu(model_tf, f.gpu, prec),
                "published_model_tflops_per_gpu": pub["published_model_tflops_per_gpu"],
                "published_newton_schulz_tflops_per_gpu": pub["published_newton_schulz_tflops_per_gpu"],
                "published_total_tflops_per_gpu": pub["published_total_tflops_per_gpu"],
                "delta_model_pct": 100 * (model_tf / pub["published_model_tflops_per_gpu"] - 1),
                "delta_newton_schulz_pct": (
                    100 * (ns_tf / pub["published_newton_schulz_tflops_per_gpu"] - 1)
                    if pub["published_newton_schulz_tflops_per_gpu"]
                    else 0.0
                ),
                "delta_total_pct": 100 * (total / pub["published_total_tflops_per_gpu"] - 1),
                "flops_formula": f.accounting["flops_formula"],
                "ns_policy": policy_text,
                "peak_table_version": f.gpu["peak_table_version"],
                "precision": f.precision["name"],
                "release": f.release["name"],
                "system": f.gpu["name"],
                "gbs": f.global_batch_size,
                "mbs": f.micro_batch_size,
                "tp": parallelism(f).tp,
                "pp": parallelism(f).pp,
                "ep": parallelism(f).ep,
            }
        )
    return pd.DataFrame(rows)


def _step_time(
    f: RunFacts, optimizer: str, pub: Any, published: list[RunRecord], measured: dict[Any, Any] | None, flops: float
) -> tuple[float, str, str]:
    """(step time in s, where it comes from, what the row proves) of one Table 1 run: your run when ``measured`` has
    it, else the published perf-table row of the same configuration (an independent check), else the blog's own
    model TFLOP/s (derived from the blog: model TFLOP/s equal the blog's by construction)."""
    match = matching_published(f, optimizer, published)
    if measured and (f.model.name, optimizer) in measured:
        step, rid = measured[(f.model.name, optimizer)]
        return step, f"your run {rid} (results store)", "your run"
    if match is not None:
        return (
            match.resolved_step_time_s(),
            f"perf table {match.release} ({match.tokens_per_sec_per_gpu:,g} tokens/s/GPU)",
            "independent check",
        )
    step = flops / (pub["published_model_tflops_per_gpu"] * 1e12 * f.num_gpus)
    return step, "blog model TFLOP/s/GPU (model TFLOP/s equal the blog's by construction)", "derived from the blog"


_LOADS: dict[tuple, object] = {}


def _ns_load(model, par, policy: NSPolicy):
    """:func:`bridgebench.model.newton_schulz.ns_load`, once per (model, parallelism, policy) in this process: Table 1
    and its policy grid ask for the same Kimi K2 load (46,567 matrices) twice."""
    key = (repr(model), par, policy)
    if key not in _LOADS:
        _LOADS[key] = ns_load(model, par, policy)
    return _LOADS[key]


def _policy_text(p: NSPolicy) -> str:
    return (
        f"{p.kernel}, {'layer-wise' if p.layer_wise else 'replicated'}, tp={p.tp_mode}, "
        f"{'split' if p.split_qkv else 'fused'} qkv, {p.num_ns_steps} steps"
    )


#: Why SYRK policies are hypothetical: no Megatron-Core that runs these benchmarks passes ``use_syrk`` to
#: emerging-optimizers' ``newton_schulz`` (megatron-core 0.19.2 ``megatron/core/optimizer/`` never mentions syrk;
#: the 26.02 stack's Emerging-Optimizers v0.1.0 does not forward it either), so the GEMM kernels run.
SYRK_NOTE = "hypothetical: SYRK kernels are not reachable through Megatron-Core (26.02 or 26.08 stack)"


def ns_policy_grid(overrides: tuple[str, ...] = ()) -> pd.DataFrame:
    """NS TFLOP/s/GPU of each Muon run of Table 1 under every counting policy, against the blog.

    The step time is the blog's own Muon run (``FLOPs/step / (blog model TFLOP/s/GPU x GPUs)``), since the blog's NS
    figure is relative to that run. Policies: kernel {gemm, syrk} x {layer-wise, replicated} x QKV {split, fused} x
    per-GPU statistic {mean, busiest}; TP modes are all equal here (both runs use TP 1).

    Columns: kernel, layer_wise, split_qkv, statistic, <model>_ns_tflops, <model>_blog, <model>_delta_pct for each
    model, ``reproduces_both`` (every |delta| <= 5 %), ``runnable`` (False for SYRK: :data:`SYRK_NOTE`) and ``note``.
    """
    blog = load_blog_table1().set_index(["model", "optimizer"])
    runs = [r for r in table1_runs(overrides) if r.facts.is_muon]
    steps = {}
    for r in runs:
        pub = blog.loc[(r.facts.model.name, "muon")]
        steps[r.facts.model.name] = flops_per_step(r.facts) / (
            pub["published_model_tflops_per_gpu"] * 1e12 * r.facts.num_gpus
        )
    rows = []
    for kernel, layer_wise, split in itertools.product(("gemm", "syrk"), (True, False), (True, False)):
        loads = {
            r.facts.model.name: _ns_load(
                r.facts.model, parallelism(r.facts), NSPolicy(kernel=kernel, layer_wise=layer_wise, split_qkv=split)
            )
            for r in runs
        }
        for stat in ("mean", "busiest"):
            row = {"kernel": kernel, "layer_wise": layer_wise, "split_qkv": split, "statistic": stat}
            ok = True
            for name, load in loads.items():
                per_gpu = load.per_gpu_mean if stat == "mean" else load.per_gpu_max
                value = per_gpu / steps[name] / 1e12
                ref = blog.loc[(name, "muon")]["published_newton_schulz_tflops_per_gpu"]
                delta = 100 * (value / ref - 1)
                row |= {f"{name}_ns_tflops": value, f"{name}_blog": ref, f"{name}_delta_pct": delta}
                ok &= abs(delta) <= 100 * NS_TOLERANCE
            row["reproduces_both"] = ok
            row["runnable"] = kernel == "gemm"
            row["note"] = "" if kernel == "gemm" else SYRK_NOTE
            rows.append(row)
    return pd.DataFrame(rows)


def write_outputs(table: pd.DataFrame, grid: pd.DataFrame, out_dir: Path | None = None) -> list[Path]:
    """Write ``table1.csv``, ``table1.md``, ``ns_policies.csv`` and ``table1.png`` under ``out_dir``; return paths.

    Files are written to a temporary name and renamed, so a reader never sees half a file.
    """
    out_dir = Path(out_dir) if out_dir is not None else load_paths().tables / "table1"  # configs/paths: tables
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "table1.csv", out_dir / "table1.md", out_dir / "ns_policies.csv", out_dir / "table1.png"]
    _atomic_text(paths[0], table.to_csv(index=False, float_format="%.6g"))
    _atomic_text(paths[1], markdown(table, grid))
    _atomic_text(paths[2], grid.to_csv(index=False, float_format="%.6g"))
    from bridgebench.results.plots import table1_bars

    tmp = paths[3].with_suffix(".tmp.png")
    table1_bars(table, tmp)
    tmp.replace(paths[3])
    return paths


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _num(value: float, spec: str) -> str:
    return "-" if value is None or value != value else format(value, spec)


#: Markdown columns of Table 1: (column, header, format). Fixed-point formats: no ``3.038e+04``.
MD_COLUMNS = (
    ("model", "model", None),
    ("optimizer", "optimizer", None),
    ("check", "what the row proves", None),
    ("step_time_s", "step (s)", ".3f"),
    ("tokens_per_sec_per_gpu", "tokens/s/GPU", ",.0f"),
    ("model_tflops_per_gpu", "model TFLOP/s/GPU", ".1f"),
    ("newton_schulz_tflops_per_gpu", "NS TFLOP/s/GPU", ".1f"),
    ("total_tflops_per_gpu", "total TFLOP/s/GPU", ".1f"),
    ("published_total_tflops_per_gpu", "blog total", ".0f"),
    ("delta_total_pct", "delta total %", "+.1f"),
    ("mfu_bf16", "MFU (BF16 peak)", ".1%"),
    ("mfu_precision", "MFU (MXFP8 peak)", ".1%"),
)


def markdown(table: pd.DataFrame, grid: pd.DataFrame) -> str:
    """Markdown rendering of Table 1 and the NS policy search (for ``results/table1/table1.md``)."""
    head = [h for _, h, _ in MD_COLUMNS]
    rows = [
        [str(getattr(r, c)) if spec is None else _num(getattr(r, c), spec) for c, _, spec in MD_COLUMNS]
        for r in table.itertuples()
    ]
    lines = [
        "# Table 1: Muon vs AdamW on GB300 (MXFP8), reproduced",
        "",
        "Generated by `bridgebench table` (analysis/table1.py). TFLOP/s are per GPU; MFU includes NS FLOPs.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" if spec is None else "---:" for _, _, spec in MD_COLUMNS) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
        "What each row proves: *independent check* -- the step time is a measurement the blog did not use (a "
        "perf-table row of the same configuration), so model TFLOP/s is a prediction checked against the blog; "
        "*derived from the blog* -- the step time is computed from the blog's own model TFLOP/s, so model TFLOP/s "
        "equals the blog's by construction and only the Newton-Schulz figure and MFU are bridgebench's.",
        "",
        "Step time sources:",
        "",
    ]
    lines += [f"- {r.model} {r.optimizer} ({r.check}): {r.step_time_source}" for r in table.itertuples()]
    gaps = independent_gaps(table)
    if gaps:
        lines += ["", "## Independent checks against the blog", ""]
        lines += [f"- {g}" for g in gaps]
    muon = table[table.optimizer == "muon"]
    lines += [
        "",
        f"NS policy: {muon.ns_policy.iloc[0] if len(muon) else '-'}",
        "",
        "## Which NS counting policy reproduces the blog's NS figures?",
        "",
        grid.to_markdown(index=False, floatfmt=".1f"),
        "",
        f"Policies reproducing both blog NS figures within {NS_TOLERANCE:.0%}: "
        f"{int(grid.reproduces_both.sum())} of {len(grid)}.",
        "",
    ]
    return "\n".join(lines)


def independent_gaps(table: pd.DataFrame, records: list[RunRecord] | None = None) -> list[str]:
    """For each *independent check* row, one sentence explaining its gap to the blog from the published sources.

    The row's step time is a perf-table measurement; the blog's model TFLOP/s at the same FLOPs count implies its own
    tokens/s/GPU (``blog TFLOP/s / (FLOPs/token)``). The sentence gives both, the gap, what rounding allows (half a
    unit of each published figure), and where the blog's figure falls among the published rows of the same
    configuration in every release (``results/reference/published_pretrain_throughput.csv``): a gap beyond rounding
    is a different measurement (another build, session or cluster), not FLOPs accounting.
    """
    records = records if records is not None else load_published()
    out = []
    for r in table[table.check == "independent check"].itertuples():
        blog = float(r.published_model_tflops_per_gpu)
        fpt = r.model_tflops_per_gpu * 1e12 / r.tokens_per_sec_per_gpu  # FLOPs/token of the row's formula
        implied = blog * 1e12 / fpt
        key = (r.model, r.optimizer, r.precision, r.system, r.num_gpus, r.gbs, r.mbs, r.tp, r.pp, r.ep)
        same = sorted(
            (
                p
                for p in records
                if (p.model, p.optimizer, p.precision, p.system, p.num_gpus, p.gbs, p.mbs, p.tp or 1, p.pp or 1)
                + (p.ep or 1,)
                == key
                and p.model_tflops_per_gpu
            ),
            key=lambda p: _release_key(p.release),
        )
        history = ", ".join(f"{p.release} {p.tokens_per_sec_per_gpu:,.0f} ({p.model_tflops_per_gpu:g})" for p in same)
        above = [p for p in same if p.tokens_per_sec_per_gpu >= implied]
        below = [p for p in same if p.tokens_per_sec_per_gpu < implied]
        where = ""
        if above and below:
            lower = max(below, key=lambda p: p.tokens_per_sec_per_gpu).release
            upper = min(above, key=lambda p: p.tokens_per_sec_per_gpu).release
            where = f"; the blog's figure lies between published releases ({lower} below it, {upper} above it)"
        gap = 100 * (r.model_tflops_per_gpu / blog - 1)
        bound = 100 * (0.5 / blog + 0.5 / r.tokens_per_sec_per_gpu)
        verdict = (
            "within rounding: the two agree"
            if abs(gap) <= bound
            else "beyond rounding, so a different measurement (another build, session or cluster), not FLOPs "
            "accounting: bridgebench's FLOPs/token reproduces that perf-table row's own TFLOP/s within its rounding "
            "(bridgebench check-published)"
        )
        out.append(
            f"{r.model} {r.optimizer}: {r.step_time_source} gives {r.model_tflops_per_gpu:.1f} model TFLOP/s/GPU "
            f"against the blog's {blog:g} ({gap:+.1f} %; the published figures' rounding allows +-{bound:.2f} %): "
            f"{verdict}. At the same {fpt:.4e} FLOPs/token the blog's {blog:g} means {implied:,.0f} tokens/s/GPU. "
            f"Published rows of this configuration (release tokens/s/GPU (TFLOP/s)): {history}{where}. Which to "
            f"believe: the perf table for NVIDIA's figure of release {r.release}; the blog for its own Muon/AdamW "
            "ratio (its AdamW and Muon rows were measured together, so compare a Muon row with the blog's AdamW)."
        )
    return out
