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


def _model_file(path: Path, *, shipped: bool) -> tuple[dict[str, Any], str | None]:
    """A model file's values and, for a user file that breaks a rule, why (``yaml_bounds``,
    ``config_name_confined``, ``config_range``, a YAML error): (``{}`` or its values, the reason)."""
    if shipped:
        return _yaml(path), None
    from bridgebench.config.bounds import BoundsError, check_confined, check_model_file, check_yaml_file

    try:
        check_confined(path, path.parent.parent)
        check_yaml_file(path)
        data = yaml.safe_load(path.read_text())
    except BoundsError as err:
        return {}, str(err)
    except (OSError, yaml.YAMLError) as err:
        return {}, f"bad_yaml: {path} cannot be read as YAML: {str(err).splitlines()[0]}"
    try:
        check_model_file(data, path)
    except BoundsError as err:
        return data if isinstance(data, dict) else {}, " ".join(str(err).split())
    return data, None


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
            source = "configs" if p.parent.parent == CONFIG_DIR else str(p.parent.parent)
            d, problem = _model_file(p, shipped=source == "configs")
            row = {
                "name": p.stem,
                "display_name": d.get("display_name"),
                "hf_model_id": d.get("hf_model_id"),
                "num_layers": d.get("num_layers"),
                "hidden_size": d.get("hidden_size"),
                "num_moe_experts": d.get("num_moe_experts"),
                "source": source,
            }
            if problem:  # one bad user file is listed as bad, with its reason; the others are listed as usual
                row["problem"] = problem
            out.append(row)
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


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return "-" if value is None else str(value)


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
    from rich.text import Text

    t = Table(title=f"{kind} (configs/{'recipe' if kind == 'recipes' else kind[:-1]}/)")
    cols = list(dict.fromkeys(k for row in data for k in row)) or ["name"]
    for col in cols:
        t.add_column(col, overflow="fold")
    for row in data:  # values are data, never rich markup (a name or reason may hold '[...]')
        t.add_row(*(Text(_cell(row.get(c))) for c in cols))
    c = Console(markup=False)
    c.width = max(c.width, 150)
    c.print(t)
