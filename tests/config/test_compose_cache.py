"""The composed-config cache: each distinct config composed once, a fresh copy per call, exact invalidation (any
config file's content, an extra config folder, the overrides), and never a cached failure."""

from __future__ import annotations

import shutil

import pytest
from omegaconf import OmegaConf

from bridgebench.config import compose_cache
from bridgebench.config.compose import ConfigError, compose
from bridgebench.paths import CONFIG_DIR


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRIDGEBENCH_CACHE", str(tmp_path / "cache"))
    compose_cache.clear_memory()
    before = dict(compose_cache.stats)
    yield lambda: {k: compose_cache.stats[k] - before[k] for k in before}
    compose_cache.clear_memory()


def test_one_compose_per_distinct_config_and_fresh_copies(fresh_cache):
    a = compose(["recipe=qwen3_30b_a3b_gb300_mxfp8"])
    b = compose(["recipe=qwen3_30b_a3b_gb300_mxfp8"])
    assert fresh_cache() == {"hits_memory": 1, "hits_disk": 0, "misses": 1}
    assert a == b and a is not b
    b.train.global_batch_size = 7  # a caller changing its copy changes nobody else's
    assert compose(["recipe=qwen3_30b_a3b_gb300_mxfp8"]).train.global_batch_size == 512
    compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "train.global_batch_size=256"])
    assert fresh_cache()["misses"] == 2


def test_disk_copy_equals_a_fresh_compose(fresh_cache, monkeypatch):
    ov = ["recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon"]
    first = compose(ov)
    compose_cache.clear_memory()  # as a new process would: only the disk copy is left
    second = compose(ov)
    assert fresh_cache() == {"hits_memory": 0, "hits_disk": 1, "misses": 1}
    assert OmegaConf.to_container(first) == OmegaConf.to_container(second)
    assert OmegaConf.get_type(second) is OmegaConf.get_type(first)
    assert OmegaConf.is_struct(second) == OmegaConf.is_struct(first)
    assert OmegaConf.is_readonly(second) == OmegaConf.is_readonly(first)
    monkeypatch.setenv("BRIDGEBENCH_CACHE", "off")
    compose_cache.clear_memory()
    compose(ov)
    assert fresh_cache()["misses"] == 2


def test_environment_interpolations_follow_the_reading_process(fresh_cache, monkeypatch, tmp_path):
    compose([])
    monkeypatch.setenv("BRIDGEBENCH_PLANS", str(tmp_path / "elsewhere"))
    assert compose([]).paths.plans == str(tmp_path / "elsewhere")


def test_a_changed_config_file_is_a_miss(fresh_cache, tmp_path, monkeypatch):
    """Content-keyed: a copy of the tree with one value changed composes anew (same overrides)."""
    tree = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, tree, symlinks=False)
    import bridgebench.paths

    monkeypatch.setattr(bridgebench.paths, "CONFIG_DIR", tree)  # config_dirs() reads it at each call
    key = compose_cache.key_of(("model=kimi_k2",), False)
    assert compose_cache.key_of(("model=kimi_k2",), False) == key
    gpu = tree / "gpu" / "gb300.yaml"
    gpu.write_text(gpu.read_text() + "\n# a comment is content too\n")
    assert compose_cache.key_of(("model=kimi_k2",), False) != key
    assert compose_cache.key_of(("model=qwen3_30b_a3b",), False) != key


def test_extra_config_dirs_are_part_of_the_key(fresh_cache, tmp_path, monkeypatch):
    extra = tmp_path / "mine"
    (extra / "model").mkdir(parents=True)
    key = compose_cache.key_of((), False)
    monkeypatch.setenv(compose_cache.CONFIG_DIR_ENV, str(extra))
    with_dir = compose_cache.key_of((), False)
    assert with_dir != key
    (extra / "model" / "my_model.yaml").write_text("name: my_model\n")
    assert compose_cache.key_of((), False) != with_dir


def test_failures_are_not_cached(fresh_cache):
    for _ in range(2):
        with pytest.raises(ConfigError, match="did you mean global_batch_size"):
            compose(["train.global_batch_sise=256"])
    assert compose_cache.key_of(("train.global_batch_sise=256",), False) not in compose_cache._memo
    assert fresh_cache()["misses"] == 3  # the bad config twice, the config without the typo once (for the hint)
