"""Validation data folders come from configs/paths (``../shared/reference`` beside the clone for the ablations, the
shipped ``results/reference`` for the tables and golden runs), move with their ``BRIDGEBENCH_*`` variable, and an
absent one is an error that names the path and the variable."""

from __future__ import annotations

import subprocess

import pytest

from bridgebench.paths import REPO_ROOT
from bridgebench.validation import data


def test_the_ablations_are_read_beside_the_clone(monkeypatch):
    monkeypatch.delenv("BRIDGEBENCH_ABLATIONS", raising=False)
    monkeypatch.delenv("BRIDGEBENCH_SHARED_REFERENCE", raising=False)
    assert data.data_dir("ablations") == REPO_ROOT.parent / "shared" / "reference" / "ablations"
    assert data.data_dir("golden") == REPO_ROOT / "results" / "reference" / "golden"
    assert data.data_dir("reference") == REPO_ROOT / "results" / "reference"


def test_each_folder_moves_with_its_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("BRIDGEBENCH_SHARED_REFERENCE", str(tmp_path / "ref"))
    assert data.data_dir("ablations") == tmp_path / "ref" / "ablations"
    monkeypatch.setenv("BRIDGEBENCH_ABLATIONS", str(tmp_path / "abl"))
    monkeypatch.setenv("BRIDGEBENCH_GOLDEN", str(tmp_path / "gold"))
    assert data.data_dir("ablations") == tmp_path / "abl"
    assert data.data_dir("golden") == tmp_path / "gold"


@pytest.mark.parametrize("key, var", [("ablations", "BRIDGEBENCH_ABLATIONS"), ("golden", "BRIDGEBENCH_GOLDEN")])
def test_absent_data_is_an_error_naming_the_path_and_the_variable(monkeypatch, tmp_path, key, var):
    monkeypatch.setenv(var, str(tmp_path / "nowhere"))
    with pytest.raises(data.ReferenceDataMissing) as e:
        data.require(key)
    assert str(tmp_path / "nowhere") in str(e.value) and var in str(e.value)
    (tmp_path / "nowhere").mkdir()
    with pytest.raises(data.ReferenceDataMissing, match="INDEX.csv"):
        data.require(key, "INDEX.csv")


def test_golden_cases_say_where_their_data_should_be(monkeypatch, tmp_path):
    from bridgebench.validation import golden

    golden.golden_cases.cache_clear()
    monkeypatch.setenv("BRIDGEBENCH_GOLDEN", str(tmp_path))
    try:
        with pytest.raises(data.ReferenceDataMissing, match="BRIDGEBENCH_GOLDEN"):
            golden.golden_cases()
    finally:
        golden.golden_cases.cache_clear()


def test_no_absolute_machine_path_in_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    found = []
    for name in files.split():
        path = REPO_ROOT / name
        if path.suffix not in (".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg", ".in", ".mk", "") or (
            not path.is_file()
        ):
            continue
        text = path.read_text(errors="replace")
        for bad in ("/" + "work/", "/" + "home/", "/" + "Users/"):  # split: this file is in the repository too
            if bad in text:
                found.append(f"{name}: {bad}")
    assert not found, found
