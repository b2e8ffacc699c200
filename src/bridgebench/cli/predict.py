"""``bridgebench predict``: one configuration through the sweep pipeline (the same code as ``sweep``, no second
path) -- memory on the busiest GPU, fits or not and what prunes it, the step-time terms, TFLOP/s/GPU, tokens/s/GPU
and the prediction's band. Works for any model of the config search path, with or without a recipe
(``$BRIDGEBENCH_CONFIG_DIR/model/<name>.yaml``)."""

from __future__ import annotations

import json
from typing import Any, Optional

import typer

from bridgebench.cli.app import OVERRIDES, app

MEMORY_TERMS = ("weights", "grads", "optimizer", "activations", "logits", "other")


def prediction(overrides: list[str], calibration: str = "default") -> dict[str, Any]:
    """The ``--json`` object of ``bridgebench predict`` (GB = 1e9 bytes; seconds; percent for ``band_pct``, the ~68 %
    band, and ``bands_pct`` at 50 / 68 / 90 %; ``band_source``: the distance from the calibration the band is for, or
    ``uncalibrated: nothing of this model/GPU was measured``).

    Raises:
        bridgebench.config.compose.ConfigError: bad overrides (an unknown model, a value breaking the schema...).
    """
    from bridgebench import sweep as engine
    from bridgebench.config import calibration as calib_mod

    calib = calib_mod.load(calibration)
    row = engine.predict(overrides, calib)
    pruned = row.pruned_by
    return {
        "model": row.model,
        "gpu": row.gpu,
        "precision": row.precision,
        "optimizer": row.optimizer,
        "release": row.time_release or row.release,
        "num_gpus": row.dims.num_gpus,
        "parallelism": {k: getattr(row.dims, k) for k in ("tp", "pp", "vp", "cp", "ep", "etp")}
        | {"dp": row.dp, "mbs": row.dims.mbs, "gbs": row.dims.gbs},
        "sequence_parallel": row.sequence_parallel,
        "pipeline_split": {
            "layout": row.layout,
            "account_for_embedding": row.account_embedding,
            "account_for_loss": row.account_loss,
        },
        "recompute": {"granularity": row.recompute_granularity, "modules": row.recompute_modules},
        "memory_gb": row.mem_total_gb,
        "memory_breakdown_gb": {k: getattr(row, f"mem_{k}_gb") for k in MEMORY_TERMS},
        "busiest_pipeline_rank": row.mem_stage,
        "hbm_gb": row.hbm_gb,
        "hbm_usable_gb": row.hbm_usable_gb,
        "fits": bool(row.fits),
        "tight": bool(row.tight),
        "pruned_by": None if pruned is None else f"{pruned['rule']}: {pruned['reason']}",
        "pruned_rule": None if pruned is None else pruned["rule"],
        "step_time_s": row.step_time_s,
        "tflops_per_gpu": row.tflops_per_gpu,
        "tokens_per_s_per_gpu": row.tokens_per_s_per_gpu,
        "band_pct": row.band_pct,
        "bands_pct": {"50": row.band_50_pct, "68": row.band_pct, "90": row.band_90_pct},
        "band_source": row.band_source,
        "terms": {k: v for k, v in row.terms_s.items() if v is not None},
        "ep_span": row.ep_span,
        "ep_leaves_nvlink": row.ep_leaves_nvlink,
        "knobs": row.knobs,
        "placement": row.placement,
        "calibration": calib.name,
        # with a cluster's own calibration (calibrate --from-runs): the published model's figures before the refit
        "step_time_model_s": row.step_time_model_s,
        "band_model_pct": row.band_model_pct,
        "cluster_calibration": row.cluster_calibration,
        "point_id": row.point_id,
    }


def _print_knobs_and_placement(con: Any, out: dict[str, Any]) -> None:
    """The knobs users do not type (as they run, and where they come from) and where the ranks land."""
    knobs = out.get("knobs") or {}
    if knobs:
        shown = ", ".join(
            f"{k} {v}" for k, v in knobs.items() if k not in ("knobs_source", "dispatcher_note") and v is not None
        )
        con.print(f"knobs ({knobs.get('knobs_source')}): {shown}")
        if knobs.get("dispatcher_note"):
            con.print(knobs["dispatcher_note"], style="yellow")
    place = out.get("placement")
    if place:
        cross = [
            f"{k} {_widest(g['splits'])}" for k, g in place["groups"].items() if g["domains"] > 1 and g["size"] > 1
        ]
        seg = place["segment_nodes"]
        con.print(
            f"placement: {place['domains']} NVLink domain(s) of {place['domain_gpus']} GPUs"
            + (f" (sbatch --segment {seg})" if seg else "")
            + (f"; groups across domains: {', '.join(cross)}" if cross else "; every group inside one domain")
            + f"; EP cross-domain copies per token {place['ep_cross_domain_copies_per_token']:.2f}"
        )


def _widest(splits: list[list[int]]) -> str:
    """The split over the most domains, as ``48/16``."""
    return "/".join(str(m) for m in max(splits, key=len))


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


@app.command()
def predict(
    overrides: Optional[list[str]] = OVERRIDES,
    calibration: str = typer.Option("default", "--calibration", help="configs/calibration/<NAME>.yaml"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Predict one configuration: memory per GPU (busiest rank), fits or not (and the rule or number that prunes
    it), step-time terms, TFLOP/s/GPU, tokens/s/GPU and the uncertainty band -- the sweep pipeline over one point.
    Any model of configs/model or $BRIDGEBENCH_CONFIG_DIR/model, with or without a recipe."""
    out = prediction(list(overrides or []), calibration)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    con = Console(markup=False)  # values are data (names, reasons), never rich markup
    par = " ".join(f"{k.upper()}{v}" for k, v in out["parallelism"].items() if v is not None)
    con.print(
        Text.assemble(
            (str(out["model"]), "bold"),
            f" on {out['num_gpus']} {out['gpu']} ({out['precision']}, {out['optimizer']}, release {out['release']}): "
            f"{par}",
        )
    )
    t = Table(title="memory per GPU, busiest pipeline rank (GB)")
    t.add_column("term")
    t.add_column("GB", justify="right")
    for k, v in out["memory_breakdown_gb"].items():
        t.add_row(k, _fmt(v, ".1f"))
    t.add_row(Text("total", "bold"), _fmt(out["memory_gb"], ".1f"))
    t.add_row("GPU memory", _fmt(out["hbm_gb"], ".1f"))
    con.print(t)
    if out["fits"]:
        verdict = Text("fits", "green")
        if out["tight"]:
            verdict.append(" (tight: above the median measured allocator fragmentation; it may run out of memory)")
    else:
        verdict = Text.assemble(("pruned", "red"), f" by {out['pruned_by']}")
    con.print(verdict)
    if out["step_time_s"] is None:
        return
    t = Table(title=f"step time (s), +-{_fmt(out['band_pct'], '.1f')} %")
    t.add_column("term")
    t.add_column("s", justify="right")
    for k, v in out["terms"].items():
        t.add_row(k, f"{v:.4f}")
    t.add_row(Text("step", "bold"), f"{out['step_time_s']:.4f}")
    con.print(t)
    _print_knobs_and_placement(con, out)
    band = out["band_pct"] or 0.0
    con.print(
        Text.assemble(
            f"{out['tflops_per_gpu']:.1f} TFLOP/s/GPU, {out['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU "
            f"(+-{band:.1f} %); expert group {out['ep_span']} GPUs",
            (" leaves the NVLink domain", "yellow") if out["ep_leaves_nvlink"] else "",
            f"; calibration {out['calibration']!r}",
        )
    )
    if out.get("band_source"):
        bands = out["bands_pct"]
        con.print(
            f"band: +-{_fmt(bands['50'], '.1f')} / {_fmt(bands['68'], '.1f')} / {_fmt(bands['90'], '.1f')} % at "
            f"50 / 68 / 90 % ({out['band_source']})"
        )
    if out.get("step_time_model_s"):
        con.print(
            f"refitted on this cluster's runs ({out['cluster_calibration']!r}, bridgebench.model.refit): the published "
            f"model says {out['step_time_model_s']:.4f} s +-{out['band_model_pct']:.1f} %; the terms above are the "
            "published model's"
        )
