"""Shared fixtures. Tests run from the repo root with the project's venv (make test)."""

from __future__ import annotations

import pytest

from bridgebench.config.compose import compose, model_spec

MODELS = ["kimi_k2", "qwen3_30b_a3b", "qwen3_235b_a22b", "deepseek_v3", "llama3_70b", "llama31_405b"]


@pytest.fixture(scope="session")
def models():
    """Every shipped model config as a ModelSpec, by name."""
    return {name: model_spec(compose([f"model={name}"])) for name in MODELS}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``: ``-n 2 --dist loadgroup``) every test that needs the local SLURM cluster
    runs on one worker, one after another: they share the cluster that a session fixture starts, its ports and its
    accounting. They mostly wait on the cluster, so the rest of the suite runs beside them on the other worker."""
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group("slurm"))
