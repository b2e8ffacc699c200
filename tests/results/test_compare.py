"""``bridgebench compare``: published histories, own runs from a real results store, outputs and provenance, and bad
input. Own-run records are written into a temporary store exactly as ``bridgebench collect`` writes them, with the
per-iteration ``series`` field; their step times are synthetic (AR(1) jitter around a per-run level)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bridgebench.cli import main
from bridgebench.paths import REPO_ROOT
from bridgebench.results import compare as cmp
from bridgebench.results.compare import outputs as cmp_outputs
from bridgebench.results.store import ResultStore


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("BRIDGEBENCH_TABLES", str(tmp_path / "tables"))
    monkeypatch.setenv("BRIDGEBENCH_RESULTS", str(tmp_path / "runs"))
    return tmp_path


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = main(["compare", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def series(level: float, n: int, rng: np.random.Generator, cv: float = 0.01, phi: float = 0.5) -> list[float]:
    e, out = 0.0, []
    for _ in range(n):
        e = phi * e + rng.normal(0, cv)
        out.append(level * math.exp(e))
    return out


def pretrain_record(
    rid: str,
    *,
    release: str = "26.02",
    optimizer: str = "adam",
    step: float = 8.6,
    model: str = "qwen3_30b_a3b",
    rng: np.random.Generator,
    iters: int = 30,
    flops_per_step: float | None = 4.83e16,
    config_hash: str | None = None,
    state="COMPLETED",
    run_cv: float = 0.01,
    window: tuple[int, int] | None = None,
) -> dict:
    """A pretrain record laid out as ``bridgebench collect`` writes it (8 GB300, MXFP8, GBS 512, seq 4096): facts of
    what ran, the resolved config, the per-iteration series and (optionally) the parser's steady window."""
    level = step * math.exp(rng.normal(0, run_cv))
    steps = series(level, iters, rng)
    tflops = [flops_per_step / s / 8 / 1e12 for s in steps] if flops_per_step else None
    return {
        "record_id": rid,
        "kind": "pretrain",
        "name": f"{model}-{optimizer}",
        "state": state,
        "model": model,
        "optimizer": optimizer,
        "gpu_planned": "gb300",
        "device": "NVIDIA GB300",
        "precision": "mxfp8",
        "num_gpus": 8,
        "global_batch_size": 512,
        "seq_length": 4096,
        "config": {
            "model": {"name": model, "seq_length": 4096},
            "gpu": {"name": "gb300"},
            "precision": {"name": "mxfp8"},
            "release": {"name": release},
            "train": {"global_batch_size": 512, "micro_batch_size": 8},
            "job": {"type": "pretrain"},
        },
        "window": {"first_iteration": window[0], "last_iteration": window[1]} if window else None,
        "step_time_s": float(np.median(steps)),
        "outcome": "completed",
        "series": {"iteration": list(range(1, iters + 1)), "step_time_s": steps, "tflops_per_gpu": tflops},
        "provenance": {
            "release": release,
            "config_hash": config_hash or f"{release}-{optimizer}-hash",
            "slurm_job_id": rid.split("/")[0],
        },
    }


def optstep_record(
    rid: str,
    optimizer: str,
    muon: float,
    adamw: float,
    rng: np.random.Generator,
    repeats: int = 5,
    layers: int = 1,
    other_share: float = 0.02,
) -> dict:
    """An optimizer-step record laid out as collect writes it: the payload (per-repeat family times, the load probe's
    share of other processes), the resolved config, no GPU, precision or batch facts (it trains nothing)."""
    fams = {}
    for fam, share in (("attention", 0.3), ("expert", 0.6), ("router", 0.1)):
        fams[fam] = {
            "muon_step_times_s": series(muon * share, repeats, rng, cv=0.02),
            "adamw_step_times_s": series(adamw * share, repeats, rng, cv=0.02),
            "ns_times_s": series(muon * share * 0.8, repeats, rng, cv=0.02),
        }
        for k in ("muon_step", "adamw_step"):
            fams[fam][f"{k}_s"] = float(np.median(fams[fam][f"{k}_times_s"]))
    total = {
        k: [sum(x) for x in zip(*(f[k] for f in fams.values()))]
        for k in ("muon_step_times_s", "adamw_step_times_s", "ns_times_s")
    }
    from bridgebench.results.optstep_series import optstep_series

    payload = {
        "kind": "optstep",
        "families": fams,
        "total": total,
        "repeats": repeats,
        "layers": layers,
        "load": {"other_share": other_share, "cpus": 2},
    }
    return {
        "record_id": rid,
        "kind": "optstep",
        "name": f"optstep-{optimizer}",
        "state": "COMPLETED",
        "model": "qwen3_30b_a3b",
        "optimizer": optimizer,
        "device": "cpu",
        "config": {
            "gpu": {"name": "gb300"},
            "precision": {"name": "bf16"},
            "job": {"type": "optstep", "layers": layers},
        },
        "window": {"first_iteration": 1, "last_iteration": 3 * repeats},  # log iterations: per-family Muon steps
        "optstep": payload,
        "series": optstep_series(payload, optimizer),
        "provenance": {"release": "26.02", "config_hash": f"opt-{optimizer}-{layers}"},
    }


# ------------------------------------------------------------------------------------------------ published


def test_kimi_k2_history_printed_with_intervals_and_marks(env, capsys):
    code, out, _ = run_cli(capsys, "model=kimi_k2", "gpu=gb300")
    assert code == 0
    assert "kimi_k2 256xgb300 mxfp8 muon: 4 release(s)" in out
    for text in (
        "26.02.01",
        "1,037 [1,036.5, 1,037.5]",
        "1,090",
        "1,088",
        "1,097",
        "tflops 1.0511 [1.0501, 1.0521]",
        "5,328 [5,320, 5,336]",
        "change points (ruptures PELT, noise CV 1.0%): 26.04",
    ):
        assert text in out, text
    folder = env / "tables" / "compare" / "published_model-kimi_k2_gpu-gb300"
    assert {p.name for p in folder.iterdir()} == {
        "history.csv",
        "history.parquet",
        "speedups.csv",
        "speedups.parquet",
        "provenance.json",
        "history.png",
        "speedup_heatmap.png",
    }
    hist = pd.read_csv(folder / "history.csv")
    assert hist["release"].astype(str).tolist() == ["26.02.01", "26.04", "26.04.01", "26.06"]
    assert hist["mark"].fillna("").tolist() == ["", "▲", "~", "~"]
    assert hist["real_change"].tolist()[1:] == [True, False, False]
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov["reference"]["file"] == "results/reference/published_pretrain_throughput.csv"
    assert len(prov["reference"]["sha256"]) == 64 and len(prov["reference"]["rows"]) == 4
    assert prov["parameters"]["threshold"] == 0.01 and prov["versions"]["ruptures"] != "not installed"
    assert cmp.parquet_provenance(folder / "history.parquet") == json.loads(json.dumps(prov, sort_keys=True))
    assert (folder / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_qwen3_history_with_config_changes(env, capsys):
    code, out, _ = run_cli(capsys, "model=qwen3_30b_a3b", "gpu=gb300", "--json", "--no-plots")
    assert code == 0
    data = json.loads(out)
    rows = data["history"]
    assert [r["release"] for r in rows] == [
        "25.11",
        "26.02",
        "26.02.01",
        "26.04",
        "26.04.01",
        "26.06",
        "26.06.01",
        "26.08",
    ]
    assert [r["tflops"] for r in rows] == [666, 699, 700, 724, 729, 1041, 1029, 1029]
    assert [r["mark"] for r in rows] == ["", "▲†", "=", "▲", "~", "▲", "▼", "="]
    assert rows[1]["config_changes"] == "mbs 4->8" and rows[1]["like_for_like"] is False
    # 26.04.01 -> 26.06 crosses the FLOPs-formula change (v1 -> v2); bridgebench's FLOPs model shows it counts Qwen3
    # the same, so the step stays on TFLOP/s
    assert rows[5]["step_metric"] == "tflops" and "counts qwen3_30b_a3b the same" in rows[5]["step_metric_reason"]
    assert rows[4]["tokens_lo"] == 31488 and rows[4]["tokens_hi"] == 32000
    assert [r["release"] for r in rows if r["change_point"]] == ["26.02", "26.04", "26.06"]
    assert not any(f.endswith(".png") for f in data["files"])


def test_25_09_rows_take_part_marked_inferred_and_token_drop(env, capsys):
    """Issue 18: the 25.09 table has no precision column; its rows were dropped without a word. Now each gets the
    precision its release's rule infers (said in a note, release marked *), and the Qwen3 30B-A3B 25.09 rows --
    token-drop runs -- are not like-for-like with the dropless 25.11."""
    code, out, _ = run_cli(capsys, "model=qwen3_30b_a3b", "gpu=gb200", "--json", "--no-plots")
    assert code == 0
    data = json.loads(out)
    mx = [r for r in data["history"] if r["precision"] == "mxfp8"]
    assert [r["release"] for r in mx][:2] == ["25.09", "25.11"]
    assert mx[0]["tokens"] == 23723 and mx[0]["precision_inferred"] and mx[0]["moe_token_drop"] is True
    assert mx[1]["like_for_like"] is False and mx[1]["config_changes"] == "moe_token_drop True->False"
    assert mx[1]["mark"].endswith("†")
    cs_ = [r for r in data["history"] if r["precision"] == "fp8_cs"]
    assert [(r["release"], r["tokens"]) for r in cs_] == [("25.09", 22775)]
    assert any(n.startswith("* precision inferred") and "FP8-CS (FP8-MX)" in n for n in data["notes"])
    code, out, _ = run_cli(capsys, "model=qwen3_30b_a3b", "gpu=gb200", "--no-plots")
    assert "25.09*" in out and "moe_token_drop True→False (not like-for-like)" in out


def test_rows_left_out_of_a_comparison_are_counted_with_why(env, capsys):
    code, out, _ = run_cli(capsys, "model=deepseek_v3", "release=25.09", "--json", "--no-plots")
    assert code == 0
    data = json.loads(out)
    reasons = {(r["release"], r["reason"].split(" (")[0]) for r in data["left_out"]}
    assert ("25.09", "no tokens/s published") in reasons  # the H100 row publishes TFLOP/s only
    line = next(n for n in data["notes"] if "in no history" in n)
    assert line.startswith(f"{len(data['left_out'])} published row(s) matching the selection are in no history")
    code, out, _ = run_cli(capsys, "model=deepseek_v3", "release=25.09", "--no-plots")
    assert "note: " in out and "no tokens/s published (TFLOP/s only): deepseek_v3 25.09" in out


def test_formula_change_on_a_model_bridgebench_cannot_count_uses_tokens(env, capsys):
    code, out, _ = run_cli(
        capsys, "model=GPT_OSS_120B", "gpu=gb200", "precision=bf16", "release=26.04.01..26.06", "--json", "--no-plots"
    )
    assert code == 0
    rows = json.loads(out)["history"]
    assert [r["release"] for r in rows] == ["26.04.01", "26.06"]
    assert rows[1]["step_metric"] == "tokens" and "cannot count" in rows[1]["step_metric_reason"]


def test_release_range_and_determinism(env, capsys):
    args = ["model=qwen3_30b_a3b", "gpu=gb300", "release=26.02..26.04", "--no-plots"]
    run_cli(capsys, *args, "--out", str(env / "one"))
    run_cli(capsys, *args, "--out", str(env / "two"))
    one = (env / "one" / "history.csv").read_text()
    assert one == (env / "two" / "history.csv").read_text()
    assert pd.read_csv(env / "one" / "history.csv")["release"].astype(str).tolist() == ["26.02", "26.02.01", "26.04"]


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["model=kimi_k2", "gpu=h100"],
            "no published row matches model=kimi_k2 gpu=h100 (keys with no overlap); "
            "published for model=kimi_k2: kimi_k2 256xgb300 mxfp8 muon",
        ),
        (["model=kimi_k2", "release=26.05"], "release '26.05' does not exist; known releases: ['25.09'"),
        (["release=26.08..26.02"], "release range '26.08..26.02' is empty"),
        (["model=kimi_k3"], "unknown model 'kimi_k3'"),
        (["gpu=z100"], "unknown gpu 'z100'"),  # a100 is a known GPU (configs/gpu/a100.yaml, issue 15)
        (["model"], "expected key=value"),
        (["--source", "nope"], "--source must be one of"),
        (["--source", "runs", "model=kimi_k2"], "the results store has no records"),
        (["--source", "both", "model=kimi_k2"], "--source both: the results store has no completed pretrain runs"),
        (["--a", "optimizer=adamw"], "give both --a and --b"),
        (["--source", "published", "--a", "optimizer=adamw", "--b", "optimizer=muon"], "use them with --source runs"),
    ],
)
def test_bad_input(env, capsys, args, message):
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and message in err, err
    assert "Traceback" not in err
    assert not (env / "tables").exists()  # nothing written


def test_outputs_never_overwrite_tracked_files(tmp_path, monkeypatch):
    """A real git repository whose tracked file sits where an output would go: nothing is written."""
    import subprocess

    assert cmp_outputs._tracked([REPO_ROOT / "README.md", tmp_path / "x.csv"]) in ([REPO_ROOT / "README.md"], [])
    repo = tmp_path / "repo"
    (repo / "out").mkdir(parents=True)
    (repo / "out" / "provenance.json").write_text("tracked\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "out/provenance.json"], check=True)
    monkeypatch.setattr(cmp_outputs, "REPO_ROOT", repo)
    with pytest.raises(cmp.CompareError, match="refusing to overwrite tracked file"):
        cmp.write_outputs(cmp.CompareResult(source="published"), repo / "out", plots=False)
    assert (repo / "out" / "provenance.json").read_text() == "tracked\n"
    assert sorted(p.name for p in (repo / "out").iterdir()) == ["provenance.json"]


# ------------------------------------------------------------------------------------------------ own runs


def fill(env: Path, records: list[dict]) -> ResultStore:
    store = ResultStore(env / "runs")
    store.add(records)
    return store


def test_runs_ten_percent_slower_gives_a_verdict_with_ci(env, capsys):
    rng = np.random.default_rng(1)
    recs = [pretrain_record(f"{100 + i}/a0/pretrain", optimizer="adam", step=8.6, rng=rng) for i in range(5)]
    recs += [
        pretrain_record(f"{200 + i}/a0/pretrain", optimizer="dist_muon", step=8.6 * 1.10, rng=rng) for i in range(5)
    ]
    fill(env, recs)
    code, out, err = run_cli(
        capsys, "--source", "runs", "model=qwen3_30b_a3b", "--a", "optimizer=adamw", "--b", "optimizer=muon", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    total = data["runs"][0]
    assert total["verdict"] == "slower" and total["runs_a"] == total["runs_b"] == 5
    assert 1.05 < total["ci_low"] < total["ratio"] < total["ci_high"] < 1.16
    assert data["provenance"]["sides"]["A"]["records"] == [f"{100 + i}/a0/pretrain" for i in range(5)]
    assert data["provenance"]["parameters"]["seed"] == 0 and data["provenance"]["versions"]["arch"]
    assert len(data["run_values"]) == 10
    folder = Path(data["files"][0]).parent
    assert folder.name == "runs_model-qwen3_30b_a3b_A_optimizer-adamw_vs_B_optimizer-muon"
    assert (folder / "runs.png").exists() and (folder / "runs.parquet").exists()
    cmd = data["provenance"]["command"]
    assert cmd[:7] == ["bridgebench", "compare", "model=qwen3_30b_a3b", "--source", "runs", "--a", "optimizer=adamw"]
    assert cmd[cmd.index("--seed") + 1] == "0" and cmd[cmd.index("--threshold") + 1] == "0.01"
    # the same command on the same store gives the same table
    _, out2, _ = run_cli(
        capsys, "--source", "runs", "model=qwen3_30b_a3b", "--a", "optimizer=adamw", "--b", "optimizer=muon", "--json"
    )
    assert json.loads(out2)["runs"] == data["runs"]
    # TFLOP/s/GPU (per-iteration series) says the same from the other side
    _, out3, _ = run_cli(
        capsys,
        "--source",
        "runs",
        "--a",
        "optimizer=adamw",
        "--b",
        "optimizer=muon",
        "--metric",
        "tflops",
        "--json",
        "--no-plots",
    )
    assert json.loads(out3)["runs"][0]["verdict"] == "slower"
    assert json.loads(out3)["runs"][0]["ratio"] == pytest.approx(1 / total["ratio"], rel=0.01)


def test_runs_same_distribution_no_significant_change(env, capsys):
    rng = np.random.default_rng(2)
    recs = [pretrain_record(f"{100 + i}/a0/pretrain", config_hash="h1", rng=rng) for i in range(5)]
    recs += [pretrain_record(f"{200 + i}/a0/pretrain", config_hash="h2", rng=rng) for i in range(5)]
    fill(env, recs)
    code, out, err = run_cli(capsys, "--source", "runs", "--a", "config_hash=h1", "--b", "config_hash=h2")
    assert code == 0, err
    assert "no significant change: ratio" in out and "threshold 1.0%" in out


def test_one_run_per_side_says_how_many_are_needed(env, capsys):
    rng = np.random.default_rng(3)
    fill(
        env,
        [
            pretrain_record("1/a0/pretrain", optimizer="adam", rng=rng),
            pretrain_record("2/a0/pretrain", optimizer="dist_muon", rng=rng),
        ],
    )
    code, out, _ = run_cli(capsys, "--source", "runs", "--a", "optimizer=adamw", "--b", "optimizer=muon", "--no-plots")
    assert code == 0
    assert "insufficient: 1 vs 1 runs (fewer than 3 per side); need 17 runs per side" in out


def test_runs_bad_selections(env, capsys):
    rng = np.random.default_rng(4)
    recs = [pretrain_record(f"{i}/a0/pretrain", optimizer="adam", rng=rng) for i in range(3)]
    recs += [
        pretrain_record(f"{10 + i}/a0/pretrain", optimizer="dist_muon", model="kimi_k2", rng=rng) for i in range(3)
    ]
    recs += [pretrain_record(f"{20 + i}/a0/pretrain", optimizer="adam", rng=rng, config_hash="other") for i in range(2)]
    recs.append(pretrain_record("30/a0/pretrain", optimizer="adam", rng=rng, state="FAILED"))
    fill(env, recs)
    base = ["--source", "runs", "--no-plots"]
    cases = [
        (
            ["--a", "optimizer=adamw", "config_hash=2", "--b", "optimizer=muon"],
            "sides differ in model (qwen3_30b_a3b vs kimi_k2), which the selection does not name: not like-for-like",
        ),
        (["--a", "optimizer=adamw", "--b", "optimizer=muon"], "side A (optimizer=adamw) mixes 2 configurations"),
        (["--a", "optimizer=adamw", "--b", "gpu=h100"], "side B: no record in the store matches gpu=h100"),
        (["--a", "optimizer=adamw", "--b", "colour=red"], "no record of the store has a field 'colour'"),
        (["--a", "optimizer=adamw", "--b", "config_hash=2"], "--a and --b select the same record"),
        (["--a", "state=FAILED", "--b", "optimizer=muon"], "1 record, none completed: 1 FAILED"),
        (["model=kimi_k2"], "nothing to compare"),
    ]
    for args, message in cases:
        code, _, err = run_cli(capsys, *base, *args)
        assert code == 2 and message in err, (args, err)
    # naming the differing key makes the comparison legitimate
    code, out, err = run_cli(capsys, *base, "--a", "model=qwen3_30b_a3b", "config_hash=2", "--b", "model=kimi_k2")
    assert code == 0, err


def test_optstep_records_per_family_with_fdr(env, capsys):
    rng = np.random.default_rng(5)
    recs = [optstep_record(f"{i}/a0/optstep", "adam", muon=2.0, adamw=0.5, rng=rng) for i in range(5)]
    recs += [optstep_record(f"{10 + i}/a0/optstep", "dist_muon", muon=2.0, adamw=0.5, rng=rng) for i in range(5)]
    fill(env, recs)
    code, out, err = run_cli(
        capsys, "--source", "runs", "--a", "optimizer=adamw", "--b", "optimizer=muon", "--json", "--no-plots"
    )
    assert code == 0, err
    rows = {r["comparison"]: r for r in json.loads(out)["runs"]}
    assert set(rows) == {f"B vs A ({f})" for f in ("total", "attention", "expert", "router")}
    assert all(r["verdict"] == "slower" and r["q_value"] is not None for r in rows.values())
    assert rows["B vs A (total)"]["ratio"] == pytest.approx(4.0, rel=0.05)
    # a payload metric: Muon step of both sides (same distribution) -> no change
    code, out, _ = run_cli(
        capsys,
        "--source",
        "runs",
        "--a",
        "optimizer=adamw",
        "--b",
        "optimizer=muon",
        "--metric",
        "muon_step",
        "--json",
        "--no-plots",
    )
    assert json.loads(out)["runs"][0]["verdict"] == "no significant change"


def test_own_release_history_and_both(env, capsys):
    rng = np.random.default_rng(6)
    flops = 699e12 * 8 * 8.63  # per step, so that 8.63 s gives the published 699 TFLOP/s/GPU
    recs = [
        pretrain_record(f"{i}/a0/pretrain", release="26.02", step=8.63, rng=rng, flops_per_step=flops, run_cv=0.002)
        for i in range(4)
    ]
    recs += [
        pretrain_record(
            f"{10 + i}/a0/pretrain", release="26.04", step=8.63 * 1.06, rng=rng, flops_per_step=flops, run_cv=0.002
        )
        for i in range(4)
    ]
    fill(env, recs)
    code, out, err = run_cli(capsys, "--source", "runs", "model=qwen3_30b_a3b", "--json", "--no-plots")
    assert code == 0, err
    (step,) = json.loads(out)["runs"]
    assert step["comparison"] == "26.04 vs 26.02" and step["verdict"] == "slower" and step["q_value"] is not None
    code, out, err = run_cli(capsys, "model=qwen3_30b_a3b", "gpu=gb300")  # auto: published + your runs
    assert code == 0, err
    assert "your runs" in out and "consistent with published" in out and "below published" in out
    assert "your runs 26.04 vs 26.02: slower" in out
    code, out, _ = run_cli(capsys, "--source", "both", "model=qwen3_30b_a3b", "--json", "--no-plots")
    data = json.loads(out)
    row = next(r for r in data["history"] if r["release"] == "26.02" and r["gpu"] == "gb300" and r["num_gpus"] == 8)
    assert row["own_runs"] == 4 and row["own_ci_low"] < 699.5 and row["own_ci_high"] > 698.5
    assert sorted(data["provenance"]["store_records"]) == sorted(r["record_id"] for r in recs)


def test_record_values_fallbacks():
    rng = np.random.default_rng(7)
    rec = optstep_record("1/a0/optstep", "dist_muon", 2.0, 0.5, rng)
    np.testing.assert_allclose(cmp.record_values(rec, "step_time"), rec["optstep"]["total"]["muon_step_times_s"])
    del rec["series"]
    np.testing.assert_allclose(cmp.record_values(rec, "step_time"), rec["optstep"]["total"]["muon_step_times_s"])
    del rec["optstep"]["total"]["muon_step_times_s"]
    rec["optstep"]["total"]["muon_step_s"] = 2.0  # a payload from before the per-repeat lists: the median only
    assert cmp.record_values(rec, "step_time").tolist() == [2.0]
    assert cmp.record_values(rec, "tokens") is None
    pre = pretrain_record("2/a0/pretrain", rng=rng, flops_per_step=None)
    assert cmp.record_values(pre, "tflops") is None
    tok = cmp.record_values(pre, "tokens")
    np.testing.assert_allclose(tok, 512 * 4096 / 8 / np.array(pre["series"]["step_time_s"]))
    with pytest.raises(cmp.CompareError, match="unknown metric"):
        cmp.record_values(pre, "speed")


def test_steady_window_of_the_record_replaces_the_skip_fraction():
    rng = np.random.default_rng(8)
    rec = pretrain_record("1/a0/pretrain", rng=rng, iters=30, window=(6, 30))
    rec["series"]["step_time_s"][:5] = [30.0] * 5  # warm-up iterations 1-5
    assert cmp.run_values(rec, "step_time").max() < 10 and len(cmp.run_values(rec, "step_time")) == 25
    rec["window"] = None  # no window: the first 10 % (3 iterations) go, the other warm-up steps stay
    v = cmp.run_values(rec, "step_time")
    assert len(v) == 27 and v.max() == 30.0
    # optimizer-step series are the payload's repeats: the log window (per-family iterations) does not apply
    opt = optstep_record("2/a0/optstep", "dist_muon", 2.0, 0.5, rng)
    np.testing.assert_allclose(cmp.run_values(opt, "step_time", skip_fraction=0), opt["series"]["step_time_s"])


def test_selection_by_config_keys_and_contention_flags(env, capsys):
    """Any key of the resolved config the job ran selects records (job.layers=, gpu= on records without a gpu
    field); runs whose payload saw other processes busy are flagged."""
    rng = np.random.default_rng(9)
    recs = [optstep_record(f"{i}/a0/optstep", "dist_muon", 1.0, 0.5, rng, layers=1) for i in range(4)]
    recs += [
        optstep_record(f"{10 + i}/a0/optstep", "dist_muon", 2.0, 1.0, rng, layers=2, other_share=0.3 if i == 0 else 0)
        for i in range(4)
    ]
    fill(env, recs)
    code, out, err = run_cli(
        capsys, "--source", "runs", "gpu=gb300", "precision=bf16", "--a", "job.layers=1", "--b", "job.layers=2"
    )
    assert code == 0, err
    ratio = float(re.search(r"total: slower: ratio ([0-9.]+) \(of the sides' mean of run medians\)", out).group(1))
    assert 1.8 < ratio < 2.2  # two layers of each kind: twice the matrices
    # every side value says which statistic it is (issue 24: compare's means and report's medians were unlabelled)
    assert "A and B = mean of run medians" in out and "A (mean of run medians)" in out
    assert "flagged 10/a0/optstep: contended (other processes used 30% of the node's CPU)" in out
