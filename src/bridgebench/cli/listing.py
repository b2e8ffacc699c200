"""``bridgebench list models|recipes|gpus|releases``: what the shipped configs offer (read as plain YAML, no
composing, no torch or megatron import)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml

from bridgebench.cli.app import app
from bridgebench.errors import BridgebenchError
from bridgebench.paths import CONFIG_DIR, RECIPES_DIR, config_files

KINDS = ("models", "recipes", "gpus", "releases")


def _yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def _defaults(data: dict[str, Any]) -> dict[str, str]:
    """``override /group: option`` entries of a recipe's defaults list, as {group: option}."""
    out = {}
    for item in data.get("defaults") or []:
        if isinstance(item, dict):
            for key, value in item.items():
                out[key.replace("override ", "").strip().lstrip("/")] = str(value)
    return out


def rows(kind: str) -> list[dict[str, Any]]:
    """One dict per option of ``kind`` (see :data:`KINDS`).

    Raises:
        BridgebenchError: an unknown kind.
    """
    if kind == "models":
        out = []
        for p in config_files("model").values():
            d = _yaml(p)
            out.append(
                {
                    "name": p.stem,
                    "display_name": d.get("display_name"),
                    "hf_model_id": d.get("hf_model_id"),
                    "num_layers": d.get("num_layers"),
                    "hidden_size": d.get("hidden_size"),
                    "num_moe_experts": d.get("num_moe_experts"),
                    "source": "configs" if p.parent.parent == CONFIG_DIR else str(p.parent.parent),
                }
            )
        return out
    if kind == "recipes":
        from bridgebench.config.compose import recipe_releases

        out = []
        for p in sorted(RECIPES_DIR.glob("*.yaml")):
            d = _yaml(p)
            g = _defaults(d)
            releases = recipe_releases(p.stem)  # recipes/<recipe>/<release>.yaml: that release's values
            latest = _yaml(RECIPES_DIR / p.stem / f"{releases[-1]}.yaml") if releases else {}
            out.append(
                {
                    "name": p.stem,
                    "model": g.get("model"),
                    "gpu": g.get("gpu"),
                    "precision": g.get("precision"),
                    "num_gpus": latest.get("num_gpus", d.get("num_gpus")),
                    "releases": releases,
                }
            )
        return out
    if kind == "gpus":
        from bridgebench.config.catalog import load_gpu, options

        out = []
        for name in options("gpu"):
            g = load_gpu(name)
            out.append(
                {
                    "name": name,
                    "display_name": g.get("display_name"),
                    "compute_capability": g.get("compute_capability"),
                    "gpus_per_node": g.get("gpus_per_node"),
                    "nvlink_domain": g.get("nvlink_domain"),
                    "precisions": _precisions(g),
                }
            )
        return out
    if kind == "releases":
        out = []
        for p in sorted((CONFIG_DIR / "release").glob("*.yaml")):
            d = _yaml(p)
            out.append(
                {
                    "name": str(d.get("name", p.stem)),
                    "container_image": d.get("container_image"),
                    "megatron_bridge_version": d.get("megatron_bridge_version"),
                    "flops_formula": d.get("flops_formula"),
                }
            )
        return out
    raise BridgebenchError(f"unknown list {kind!r}; choose one of {', '.join(KINDS)}")


def _precisions(gpu: dict[str, Any]) -> list[str]:
    """Precisions the GPU runs: its compute capability reaches the precision's minimum (rule precision_needs_gpu)."""
    cc = gpu.get("compute_capability")
    out = []
    for p in sorted((CONFIG_DIR / "precision").glob("*.yaml")):
        need = (_yaml(p).get("precision") or {}).get("min_compute_capability")
        if cc is None or need is None or float(cc) >= float(need):
            out.append(p.stem)
    return out


@app.command("list")
def list_cmd(
    kind: str = typer.Argument(..., help="models, recipes, gpus or releases"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """List the shipped models, recipes, GPUs (with the precisions each runs) or releases."""
    data = rows(kind)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{kind} (configs/{'recipe' if kind == 'recipes' else kind[:-1]}/)")
    for col in data[0] if data else ["name"]:
        t.add_column(col)
    for row in data:
        t.add_row(*(", ".join(v) if isinstance(v, list) else ("-" if v is None else str(v)) for v in row.values()))
    c = Console()
    c.width = max(c.width, 150)
    c.print(t)
