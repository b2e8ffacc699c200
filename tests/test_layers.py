"""The package's layer order (pyproject.toml [tool.importlinter]) holds, and the contract catches an upward import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from bridgebench.paths import REPO_ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"},
    )


def test_layers_are_kept():
    res = _lint(REPO_ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(
        REPO_ROOT / "src" / "bridgebench",
        tmp_path / "src" / "bridgebench",
        ignore=shutil.ignore_patterns("__pycache__", "hf_configs"),
    )
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path / "src" / "bridgebench"


def _plant(module: Path, target: str) -> None:
    module.write_text(module.read_text() + f"\n\ndef _upward():\n    import {target}  # noqa\n")


def test_an_upward_import_breaks_the_contract(tmp_path):
    pkg = _copy(tmp_path)
    _plant(pkg / "model" / "flops.py", "bridgebench.launch.plan")
    res = _lint(tmp_path)
    assert res.returncode != 0
    assert "BROKEN" in res.stdout and "bridgebench.model.flops -> bridgebench.launch.plan" in res.stdout


def test_the_sweep_engine_sits_between_config_and_results(tmp_path):
    """``sweep`` imports the config and the models, never the results store or launch; config never imports it."""
    pkg = _copy(tmp_path)
    _plant(pkg / "sweep" / "keys.py", "bridgebench.results.store")
    _plant(pkg / "config" / "compose.py", "bridgebench.sweep.space")
    res = _lint(tmp_path)
    assert res.returncode != 0 and "BROKEN" in res.stdout
    for chain in (
        "bridgebench.sweep.keys -> bridgebench.results.store",
        "bridgebench.config.compose -> bridgebench.sweep.space",
    ):
        assert chain in res.stdout, chain


def test_validation_sits_above_model_and_config_and_below_cli(tmp_path):
    """``validation`` may import the models, the config and the results store, never the CLI; nothing below it (the
    model, the config, the store) may import it; ``launch`` and ``validation`` are independent."""
    assert "bridgebench.launch | bridgebench.validation" in (REPO_ROOT / "pyproject.toml").read_text()
    pkg = _copy(tmp_path)
    _plant(pkg / "validation" / "metrics.py", "bridgebench.cli.app")
    _plant(pkg / "model" / "spec.py", "bridgebench.validation.metrics")
    _plant(pkg / "config" / "catalog.py", "bridgebench.validation.golden")
    _plant(pkg / "results" / "records.py", "bridgebench.validation.data")
    _plant(pkg / "launch" / "plan.py", "bridgebench.validation.metrics")
    res = _lint(tmp_path)
    assert res.returncode != 0 and "BROKEN" in res.stdout
    for chain in (
        "bridgebench.validation.metrics -> bridgebench.cli.app",
        "bridgebench.model.spec -> bridgebench.validation.metrics",
        "bridgebench.config.catalog -> bridgebench.validation.golden",
        "bridgebench.results.records -> bridgebench.validation.data",
        "bridgebench.launch.plan -> bridgebench.validation.metrics",
    ):
        assert chain in res.stdout, chain


def test_model_math_imports_no_heavy_packages():
    code = (
        "import sys, bridgebench.model.flops, bridgebench.model.newton_schulz, bridgebench.model.mfu, "
        "bridgebench.model.spec, bridgebench.model.layout, bridgebench.model.optimizer, bridgebench.model.memory, "
        "bridgebench.model.steptime.predict\n"
        "heavy = [m for m in ('hydra', 'omegaconf', 'pandas', 'torch', 'megatron', 'yaml') if m in sys.modules]\n"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert res.returncode == 0, res.stdout + res.stderr


def test_old_top_level_packages_are_gone():
    for name in ("analysis", "launch", "recipes"):
        res = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, cwd="/")
        assert res.returncode != 0 and "ModuleNotFoundError" in res.stderr, name


def test_the_site_sits_between_the_cli_and_launch_validation(tmp_path):
    """``site`` may read launch, validation and results, never the CLI; nothing below it may import it."""
    assert '"bridgebench.cli",\n  "bridgebench.site",' in (REPO_ROOT / "pyproject.toml").read_text()
    pkg = _copy(tmp_path)
    _plant(pkg / "site" / "layout.py", "bridgebench.cli.app")
    _plant(pkg / "validation" / "metrics.py", "bridgebench.site.layout")
    _plant(pkg / "results" / "store.py", "bridgebench.site.build")
    res = _lint(tmp_path)
    assert res.returncode != 0 and "BROKEN" in res.stdout
    for chain in (
        "bridgebench.site.layout -> bridgebench.cli.app",
        "bridgebench.validation.metrics -> bridgebench.site.layout",
        "bridgebench.results.store -> bridgebench.site.build",
    ):
        assert chain in res.stdout, chain
