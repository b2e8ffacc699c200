"""Each ablation row is priced at the release of the software it ran (bridgebench.validation.ablation_time
.software_release): the NeMo container its framework cell names, the month of the Megatron-LM commit its source
quotes, or none (a paper's or another framework's run: the group's mean level). Read from the shared ablation sets
(configs/paths ``ablations``); absent sets fail naming the path, they do not skip."""

from __future__ import annotations

import pytest

from bridgebench.config.catalog import load_gpu
from bridgebench.model.steptime.config import GpuFacts
from bridgebench.validation import ablations as abl
from bridgebench.validation.ablation_time import point_of, software_release
from bridgebench.validation.data import ReferenceDataMissing

H100 = GpuFacts.from_mapping(load_gpu("h100"))


@pytest.fixture(scope="module")
def sets():
    try:
        return {p.stem: abl.read_set(p) for p in abl.set_files()}
    except ReferenceDataMissing as e:
        pytest.fail(str(e))


def test_each_sets_release_comes_from_what_its_rows_name(sets):
    releases = {s: {software_release(r)[0] for r in rows} for s, rows in sets.items()}
    assert releases["dgxc_v2503_llama31_70b_h100"] == {"24.12"}  # nvcr.io/nvidia/nemo:24.12
    assert releases["mlm_dev_moe_recipes_qwen3"] == {"26.08"}  # Megatron-LM d48bd6be, 2026-08-21
    assert releases["narayanan2021_t1_weak_scaling"] == {None}
    assert releases["torchtitan_llama31_h100_202412"] == {None}


def test_the_release_reaches_the_time_config_and_the_notes(sets):
    row = sets["dgxc_v2503_llama31_70b_h100"][0]
    cfg, notes = point_of(row, H100)
    assert cfg.release == "24.12" and any("NeMo 24.12 container" in n for n in notes)
    other = {**row, "framework": "Megatron-LM (2021)", "source": "arXiv 2104.04473"}
    cfg, notes = point_of(other, H100)
    assert cfg.release is None and not any(n.startswith("release") for n in notes)
