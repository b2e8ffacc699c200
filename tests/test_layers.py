"""The package's layer order (pyproject.toml [tool.importlinter]) holds, and the contract catches an upward import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize(
    "module, target",
    [
        ("model/flops.py", "bridgebench.launch.plan"),
        ("sweep/keys.py", "bridgebench.results.store"),  # the sweep engine sits below results / launch
        ("config/compose.py", "bridgebench.sweep.space"),  # ... and above config
    ],
)
def test_an_upward_import_breaks_the_contract(tmp_path, module, target):
    shutil.copytree(
        REPO_ROOT / "src" / "bridgebench",
        tmp_path / "src" / "bridgebench",
        ignore=shutil.ignore_patterns("__pycache__", "hf_configs"),
    )
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    planted = tmp_path / "src" / "bridgebench" / module
    package, name = target.rsplit(".", 1)
    planted.write_text(planted.read_text() + f"\n\ndef _upward():\n    from {package} import {name}  # noqa\n")
    res = _lint(tmp_path)
    assert res.returncode != 0
    source = "bridgebench." + module.removesuffix(".py").replace("/", ".")
    assert "BROKEN" in res.stdout and f"{source} -> {target}" in res.stdout, res.stdout


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
