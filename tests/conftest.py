"""Shared fixtures. Tests run from the repo root with the project's venv (make test)."""

from __future__ import annotations

import pytest

from bridgebench.config.compose import compose, model_spec

MODELS = ["kimi_k2", "qwen3_30b_a3b", "qwen3_235b_a22b", "deepseek_v3", "llama3_70b", "llama31_405b"]


@pytest.fixture(scope="session")
def models():
    """Every shipped model config as a ModelSpec, by name."""
    return {name: model_spec(compose([f"model={name}"])) for name in MODELS}
