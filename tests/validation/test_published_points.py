"""NVIDIA's published runs through the sweep pipeline (bridgebench.validation.published_points): the memory model and
the rules keep every configuration that ran; the rows they refuse are named, each with its reason."""

from __future__ import annotations

import pytest

from bridgebench.results.records import load_published
from bridgebench.validation.published_points import (
    SettingsError,
    check_entries,
    published_points,
    release_settings,
    summary,
)
from bridgebench.validation.time_calibration import entry_knobs

#: published rows that cannot be counted as false prunes, each with its reason (benchmarks/validate_memory_published.py)
KNOWN = {
    # printed as PP 8 x EP 64 on 256 GPUs: no expert grid fits (the table's sizes); the release's launcher has no
    # configuration for this half of the row (published_settings.yaml says why)
    ("25.09", "deepseek_v3", "gb200", "mxfp8", 8): "expert_grid",
}
#: rows judged with their release launcher's sizes (published_settings.yaml, ``replaces_printed``), not the printed ones
REPLACED = {
    ("25.09", "llama3_70b", "gb200", "mxfp8"): "train.micro_batch_size 2 -> 1",
    ("26.02.01", "llama3_70b", "gb300", "mxfp8"): "train.micro_batch_size 2 -> 1, "
    "model.virtual_pipeline_model_parallel_size None -> 5",
    ("26.02.01", "llama3_70b", "gb300", "nvfp4"): "train.micro_batch_size 2 -> 1, "
    "model.pipeline_model_parallel_size 1 -> 4, model.virtual_pipeline_model_parallel_size None -> 5",
    # 26.02.01 rows printed with a preset's sizes older than the release's launcher (v0.3.1)
    ("26.02.01", "llama31_405b", "gb200", "nvfp4"): "model.virtual_pipeline_model_parallel_size 4 -> 8",
    ("26.02.01", "llama31_405b", "gb300", "fp8_cs"): "model.tensor_model_parallel_size 2 -> 4, "
    "model.context_parallel_size 2 -> 1",
    ("26.02.01", "qwen3_235b_a22b", "b300", "mxfp8"): "model.virtual_pipeline_model_parallel_size 4 -> None",
    # a row of a release bridgebench ships a recipe for: the entry applies over the recipe too
    ("26.02.01", "qwen3_30b_a3b", "h100", "fp8_cs"): "model.pipeline_model_parallel_size 2 -> 1, "
    "model.virtual_pipeline_model_parallel_size 12 -> None, model.expert_model_parallel_size 8 -> 16",
}


@pytest.fixture(scope="module")
def table():
    return published_points()


def test_no_published_configuration_is_pruned(table):
    s = summary(table)
    assert s["rows"] == len([r for r in load_published() if r.model and r.system]) >= 183
    refused = {
        (r.release, r.model, r.system, r.precision, r.pp): r.pruned_by for r in table[~table["fits"]].itertuples()
    }
    assert refused == KNOWN
    assert s["inconsistent"] == 1 and s["false_prunes"] == 0
    assert table["fits"].sum() == s["rows"] - 1
    assert "launcher has one GB200 configuration" in table[~table["fits"]].iloc[0]["reason"]


def test_rows_judged_with_their_launchers_sizes_say_so(table):
    replaced = table[table["printed_replaced"].notna()]
    assert {(r.release, r.model, r.system, r.precision): r.printed_replaced for r in replaced.itertuples()} == REPLACED
    assert replaced["fits"].all() and replaced["settings_source"].str.contains("@v0.").all()


def test_the_printed_sizes_replaced_are_still_refused(table):
    """The fix is in the data, not the model: 26.02.01's GB300 MXFP8 row as printed (PP 4 without VP at MBS 2, no
    recompute or offloading) is still over the GPU's memory -- the pruner is not blinder for it."""
    from bridgebench.config import calibration
    from bridgebench.sweep.pipeline import predict

    row = table[(table.release == "26.02.01") & (table.system == "gb300") & (table.precision == "mxfp8")].iloc[0]
    printed = [
        "train.micro_batch_size=2" if o == "train.micro_batch_size=1"
        else "model.virtual_pipeline_model_parallel_size=null"
        if o.startswith("model.virtual_pipeline_model_parallel_size=") else o
        for o in row["overrides"].split(" ")
    ]  # fmt: skip
    assert printed != row["overrides"].split(" ")
    out = predict(printed, calibration.load())
    assert not out.fits and out.mem_total_gb > 1.2 * out.hbm_gb


def test_every_row_says_where_its_settings_come_from(table):
    assert table["settings_source"].str.len().min() > 10
    llama = table[(table.model == "llama31_405b") & (table.system == "gb300") & (table.release == "26.04")]
    # 26.04's GB300 recipes: Megatron-Core's account_for split, 15 layers on the first rank (not 20)
    assert set(llama["account_embedding"]) == {True} and set(llama["fits"]) == {True}
    qwen = table[(table.model == "qwen3_235b_a22b") & (table.system == "gb300")]
    assert set(qwen["fits"]) == {True} and "pipeline_split_conflict" not in set(table["rule"].dropna())
    fsdp = table[(table.model == "llama3_70b") & (table.system == "gb200") & (table.precision == "fp8_cs")]
    assert fsdp["settings_source"].str.contains("llama3_70b_pretrain_64gpu_gb200_fp8cs_config").all()
    assert set(fsdp["fits"]) == {True}


def test_release_settings_name_their_source():
    for entry in release_settings():
        assert entry["releases"] and "@v0." in entry["source"]
        assert entry["settings"] or entry.get("cannot_run_as_printed")


def _entry(**settings: object) -> dict[str, object]:
    return {
        "releases": ["26.02"], "model": "qwen3_235b_a22b", "gpu": "b300", "precision": "mxfp8",
        "settings": dict(settings), "source": "scripts/performance/x.py@v0.3.0",
    }  # fmt: skip


def test_a_misspelled_settings_key_is_refused_with_the_field_it_meant():
    good = _entry(**{"model.moe_token_dispatcher_type": "alltoall"})
    assert check_entries([good]) == [good]
    with pytest.raises(
        SettingsError,
        match=r"published_settings.*model.moe_token_dispatcher_typ'.*did you mean "
        r"model.moe_token_dispatcher_type",
    ):
        check_entries([_entry(**{"model.moe_token_dispatcher_typ": "alltoall"})])
    with pytest.raises(SettingsError, match="has no key 'replace_printed'; did you mean replaces_printed"):
        check_entries([{**good, "replace_printed": True}])
    with pytest.raises(SettingsError, match="lacks source"):
        check_entries([{k: v for k, v in good.items() if k != "source"}])


def test_every_settings_key_is_priced_by_the_time_rows_or_declared_unpriced():
    for entry in release_settings():
        entry_knobs(entry)  # raises on a key the time rows would drop
    known_to_memory_only = _entry(**{"model.cpu_offloading": True})
    assert entry_knobs(known_to_memory_only) == {}
    priced = _entry(**{"comm_overlap.overlap_moe_expert_parallel_comm": False})
    assert entry_knobs(priced) == {"overlap_moe_expert_parallel_comm": False}
    # a Megatron-Bridge field the entry file accepts but the time model neither prices nor declares: refused
    with pytest.raises(SettingsError, match="neither prices nor declares unpriced"):
        entry_knobs(_entry(**{"model.moe_router_fusion": True}))
