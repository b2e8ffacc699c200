"""The optimizer-step benchmark payload (launch/optstep.py): real Megatron-Core TensorParallelMuon vs torch AdamW on
Qwen3 30B-A3B's Muon matrices (layer 0, 2 experts), the subset rules, the QKV split wiring, and the CLI's errors.

The in-process run uses ``warmup=1, repeats=2`` to keep the suite fast; its timings are still real optimizer steps
of the full-size matrices, warm (a cold first AdamW step allocates its state: under a loaded machine it once took
longer than the router's Muon step) and the median of two. On a CPU it runs FP32 matmuls at precision ``highest`` (the
payload's CPU rule, tested below), so its time does not depend on whether the CPU has native BF16: at the recipes'
``medium`` an AVX2-only CPU spent over 40 minutes in this fixture.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections import Counter, defaultdict

import pytest
from omegaconf import OmegaConf

from bridgebench.config.compose import compose, model_spec
from bridgebench.model.newton_schulz import ns_flops
from bridgebench.paths import REPO_ROOT
from bridgebench.payloads import optstep
from bridgebench.payloads.optstep import MARKER, OptstepError, group_params, select_matrices, selected_layers

#: CPU-heavy: make test runs it in the background half, beside the SLURM tests (Makefile).
pytestmark = pytest.mark.background


@pytest.fixture(scope="module")
def qwen_cfg():
    return compose(["model=qwen3_30b_a3b", "optimizer=muon"])


@pytest.fixture(scope="module")
def qwen_run(qwen_cfg, tmp_path_factory):
    """One in-process run: (result dict, stdout text, out dir)."""
    out = tmp_path_factory.mktemp("optstep")
    buf = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(buf):
        mp.setenv("BRIDGEBENCH_CONFIG_HASH", "abc123")
        mp.delenv("SLURM_JOB_ID", raising=False)
        result = optstep.run_optstep(qwen_cfg, out, layers=1, experts=2, warmup=1, repeats=2, device="cpu")
    return result, buf.getvalue(), out


# ------------------------------------------------------------------------------------------- subset (no torch)
def test_selected_layers_take_each_mlp_kind(models):
    assert selected_layers(models["qwen3_30b_a3b"], 1) == [0]
    assert selected_layers(models["qwen3_30b_a3b"], 3) == [0, 1, 2]
    assert selected_layers(models["kimi_k2"], 1) == [0, 1]  # layer 0 dense, layer 1 the first MoE layer
    assert selected_layers(models["kimi_k2"], 2) == [0, 1, 2]  # Kimi K2 has a single dense layer
    assert selected_layers(models["llama3_70b"], 2) == [0, 1]
    with pytest.raises(OptstepError, match="layers must be a positive integer"):
        selected_layers(models["kimi_k2"], 0)


def test_select_matrices_kimi_covers_every_family(models):
    mats = select_matrices(models["kimi_k2"], layers=1, experts=1)
    fam = Counter(m.family for m in mats)
    assert fam == {"attention": 10, "mlp_dense": 2, "router": 1, "expert": 2, "shared_expert": 2}
    assert {m.name for m in mats if m.family == "expert"} == {
        "layers.1.mlp.experts.linear_fc1.weight0",
        "layers.1.mlp.experts.linear_fc2.weight0",
    }
    only = select_matrices(models["kimi_k2"], layers=1, experts=1, families=["router", "expert"])
    assert {m.family for m in only} == {"router", "expert"}


def test_select_matrices_rejects_bad_subsets(models):
    with pytest.raises(OptstepError, match="experts must be a positive integer"):
        select_matrices(models["qwen3_30b_a3b"], experts=0)
    with pytest.raises(OptstepError, match="exceeds the model's num_moe_experts=128"):
        select_matrices(models["qwen3_30b_a3b"], experts=129)
    with pytest.raises(OptstepError, match="unknown families"):
        select_matrices(models["qwen3_30b_a3b"], families=["attn"])
    with pytest.raises(OptstepError, match="no Muon matrices"):
        select_matrices(models["qwen3_30b_a3b"], families=["mlp_dense"])  # Qwen3 30B-A3B has no dense MLP


def test_group_params_fuses_split_qkv(models):
    m = models["qwen3_30b_a3b"]
    specs = group_params(select_matrices(m, families=["attention"]))
    qkv = [s for s in specs if s.is_qkv]
    assert len(qkv) == 1 and [p.name.rsplit(".", 1)[1] for p in qkv[0].pieces] == ["q", "k", "v"]
    d, g, n, h = m.head_dim, m.query_groups, m.num_attention_heads, m.hidden_size
    assert (qkv[0].rows, qkv[0].cols) == (n * d + 2 * g * d, h)
    unsplit = group_params(select_matrices(m, split_qkv=False, families=["attention"]))
    assert not any(s.is_qkv for s in unsplit) and len(unsplit) == 2


def test_job_defaults_come_from_config():
    assert optstep.job_default(OmegaConf.create({"job": {"layers": 3}}), "layers", 1) == 3
    assert optstep.job_default(OmegaConf.create({"job": {"layers": 3}}), "experts", 2) == 2
    assert optstep.job_default(OmegaConf.create({}), "repeats", 5) == 5


def test_experiment_config_composes():
    cfg = compose(["experiment=optstep_local"])
    assert cfg.model.name == "qwen3_30b_a3b" and "muon" in cfg.optimizer.optimizer
    assert (cfg.job.type, cfg.job.layers, cfg.job.experts, cfg.job.repeats) == ("optstep", 1, 1, 1)


# ------------------------------------------------------------------------------------------- Megatron wiring
@pytest.mark.megatron
def test_muon_settings_follow_the_run_config(qwen_cfg):
    m = model_spec(qwen_cfg)
    kw = optstep.muon_settings(OmegaConf.to_container(qwen_cfg.optimizer, resolve=True), m)
    o = qwen_cfg.optimizer
    assert kw["num_ns_steps"] == o.muon_num_ns_steps and kw["coefficient_type"] == o.muon_coefficient_type
    assert kw["momentum"] == o.muon_momentum and kw["nesterov"] == o.muon_nesterov
    assert kw["split_qkv"] is True and kw["fp32_matmul_prec"] == o.muon_fp32_matmul_prec
    assert kw["tp_mode"] == o.muon_tp_mode and kw["pg_collection"] is None
    # Megatron's per-group split shapes x query groups == the MuonMatrix pieces (Q, K, V)
    pieces = next(s for s in group_params(select_matrices(m, families=["attention"])) if s.is_qkv).pieces
    assert [r * m.query_groups for r in kw["qkv_split_shapes"]] == [p.rows for p in pieces]
    bad = {**OmegaConf.to_container(qwen_cfg.optimizer, resolve=True), "muon_coefficient_type": "nope"}
    with pytest.raises(OptstepError, match="Unsupported muon coefficient type"):
        optstep.muon_settings(bad, m)


@pytest.mark.megatron
def test_muon_step_orthogonalizes_the_split_pieces(models, monkeypatch):
    """On a tiny GQA model: every newton_schulz call (Muon step and NS alone) gets exactly the MuonMatrix shapes,
    i.e. the fused QKV parameter is split by TensorParallelMuon, not orthogonalized whole."""
    import torch
    from emerging_optimizers.orthogonalized_optimizers import muon_utils

    tiny = models["qwen3_30b_a3b"].replace(
        hidden_size=64,
        num_attention_heads=4,
        num_query_groups=2,
        kv_channels=16,
        moe_ffn_hidden_size=32,
        num_moe_experts=4,
        moe_router_topk=2,
    )
    cfg = compose(["model=qwen3_30b_a3b", "optimizer=muon"])
    kw = optstep.muon_settings(OmegaConf.to_container(cfg.optimizer, resolve=True), tiny)
    specs = group_params(select_matrices(tiny, families=["attention"]))
    seen = []
    real = muon_utils.newton_schulz

    def spy(x, *args, **kwargs):
        seen.append(tuple(x.shape))
        return real(x, *args, **kwargs)

    monkeypatch.setattr(muon_utils, "newton_schulz", spy)
    fig, _ = optstep.time_family(
        specs,
        device=torch.device("cpu"),
        muon_kwargs=kw,
        adamw_kwargs=optstep.adamw_settings({}),
        warmup=0,
        repeats=1,
        generator=torch.Generator().manual_seed(0),
    )
    expected = Counter((p.rows, p.cols) for s in specs for p in s.pieces)
    assert Counter(seen) == Counter({k: 2 * v for k, v in expected.items()})  # Muon step + NS alone
    assert (64, 64) in expected and (32, 64) in expected  # Q (4x16, 64) and K/V (2x16, 64)
    assert fig["matrices"] == 4 and fig["ns_flops"] == sum(ns_flops(r, c) * n for (r, c), n in expected.items())


# ------------------------------------------------------------------------------------------- matmul precision
def test_matmul_precision_cpu_runs_ieee_fp32_gpu_keeps_the_recipes():
    prec, why = optstep.matmul_precision("cpu", "medium")
    assert prec == "highest" and "BF16" in why and "medium" in why
    assert optstep.matmul_precision("cuda", "medium") == ("medium", None)
    assert optstep.matmul_precision("cpu", "highest") == ("highest", None)
    assert optstep.matmul_precision("cpu", "medium", "recipe") == ("medium", None)
    assert optstep.matmul_precision("cuda", "medium", "high") == ("high", "forced by --fp32-matmul-prec high")
    with pytest.raises(OptstepError, match="--fp32-matmul-prec must be one of"):
        optstep.matmul_precision("cpu", "medium", "fast")


@pytest.mark.megatron
def test_cpu_run_records_the_precision_that_ran(qwen_run, qwen_cfg):
    result, _, _ = qwen_run
    assert qwen_cfg.optimizer.muon_fp32_matmul_prec == "medium"  # the recipes' GPU setting
    assert result["fp32_matmul_prec"] == "highest" and result["recipe_fp32_matmul_prec"] == "medium"
    assert "CPU run" in result["fp32_matmul_prec_reason"]


@pytest.mark.megatron
def test_newton_schulz_runs_at_the_chosen_precision(models, monkeypatch):
    """Every newton_schulz call -- inside the Muon step and alone -- sees torch's matmul precision set to the
    precision the payload chose, not the recipe's."""
    import torch
    from emerging_optimizers.orthogonalized_optimizers import muon_utils

    tiny = models["qwen3_30b_a3b"].replace(hidden_size=64, num_attention_heads=4, num_query_groups=2, kv_channels=16)
    cfg = compose(["model=qwen3_30b_a3b", "optimizer=muon"])
    kw = optstep.muon_settings(OmegaConf.to_container(cfg.optimizer, resolve=True), tiny)
    kw["fp32_matmul_prec"], _ = optstep.matmul_precision("cpu", kw["fp32_matmul_prec"])
    seen = []
    real = muon_utils.newton_schulz

    def spy(x, *args, **kwargs):
        seen.append(torch.get_float32_matmul_precision())
        return real(x, *args, **kwargs)

    monkeypatch.setattr(muon_utils, "newton_schulz", spy)
    optstep.time_family(
        group_params(select_matrices(tiny, families=["attention"])),
        device=torch.device("cpu"),
        muon_kwargs=kw,
        adamw_kwargs=optstep.adamw_settings({}),
        warmup=0,
        repeats=1,
        generator=torch.Generator().manual_seed(0),
    )
    assert seen and set(seen) == {"highest"}


# ------------------------------------------------------------------------------------------- the real run
@pytest.mark.megatron
def test_run_families_and_times(qwen_run):
    result, _, _ = qwen_run
    assert result["kind"] == "optstep" and result["model"] == "qwen3_30b_a3b"
    assert set(result["families"]) == {"attention", "expert", "router"}  # no dense MLP, no shared expert
    assert result["layer_indices"] == [0] and result["layers"] == 1 and result["experts"] == 2
    assert (result["num_ns_steps"], result["coefficient_type"], result["dtype"]) == (5, "quintic", "fp32")
    assert result["muon_class"].endswith("TensorParallelMuon") and result["adamw_impl"] in ("fused", "foreach")
    # Muon does 5 NS iterations of matmuls per matrix on top of AdamW-like elementwise work: slower everywhere,
    # even the small router (128 x 2048).
    for fam, f in {**result["families"], "total": result["total"]}.items():
        assert f["muon_step_s"] > f["adamw_step_s"] > 0, fam
        assert f["ns_time_s"] > 0, fam
        assert f["ratio"] == pytest.approx(f["muon_step_s"] / f["adamw_step_s"]), fam
        assert f["ns_flops_per_s"] == pytest.approx(f["ns_flops"] / f["ns_time_s"]), fam


@pytest.mark.megatron
def test_run_flops_and_sizes_match_the_subset(qwen_run, qwen_cfg):
    result, _, _ = qwen_run
    mats = select_matrices(model_spec(qwen_cfg), layers=1, experts=2, split_qkv=True)
    want = defaultdict(lambda: [0, 0, 0])
    for m in mats:
        want[m.family][0] += 1
        want[m.family][1] += m.rows * m.cols
        want[m.family][2] += ns_flops(m.rows, m.cols, 5, "gemm")
    for fam, (n, numel, flops) in want.items():
        f = result["families"][fam]
        assert (f["matrices"], f["params"], f["ns_flops"]) == (n, numel, flops), fam
    assert result["families"]["expert"]["matrices"] == 4  # fc1 + fc2 of experts 0 and 1
    t = result["total"]
    assert t["ns_flops"] == sum(ns_flops(m.rows, m.cols, 5, "gemm") for m in mats)
    assert t["matrices"] == len(mats) and t["params"] == sum(m.rows * m.cols for m in mats)
    assert t["muon_step_s"] == pytest.approx(sum(f["muon_step_s"] for f in result["families"].values()))


@pytest.mark.megatron
def test_run_writes_json_and_one_marker_line(qwen_run):
    result, stdout, out = qwen_run
    lines = stdout.splitlines()
    assert [i for i, line in enumerate(lines) if line.startswith(MARKER)] == [len(lines) - 1]
    assert json.loads(lines[-1][len(MARKER) :]) == result
    # issue 10: one Megatron-LM iteration line per timed Muon step before it, read by the log parser
    from bridgebench.logs.parser import parse_log

    parsed = parse_log("\n".join(lines[:-1]) + "\n", warmup_steps=0, min_steps=1)
    n = len(result["families"]) * result["repeats"]
    assert len(lines) == n + 1 and [s.iteration for s in parsed.steps] == list(range(1, n + 1))
    assert parsed.format == "megatron_lm" and parsed.outcome == "completed" and parsed.total_iters == n
    assert all(s.step_time_s > 0 for s in parsed.steps)
    assert json.loads((out / "optstep.json").read_text()) == result
    assert [p.name for p in out.iterdir()] == ["optstep.json"]  # no temp file left
    assert result["config_hash"] == "abc123" and result["slurm_job_id"] is None and result["node"]
    assert set(result["versions"]) == {"torch", "emerging_optimizers", "megatron_core"}
    assert result["versions"]["megatron_core"] == "0.19.2" and result["versions"]["emerging_optimizers"] == "0.3.0"


# ------------------------------------------------------------------------------------------- CLI errors
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bridgebench.payloads.optstep", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def saved_cfg(qwen_cfg, tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    OmegaConf.save(qwen_cfg, path, resolve=True)
    return path


def test_cli_rejects_missing_config(tmp_path):
    res = _cli("--config", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "out"))
    assert res.returncode == 2, res.stderr
    assert "does not exist" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_cli_rejects_layers_zero(saved_cfg, tmp_path):
    res = _cli("--config", str(saved_cfg), "--out", str(tmp_path / "out"), "--layers", "0")
    assert res.returncode == 2, res.stderr
    assert "--layers" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_cli_rejects_a_non_bridgebench_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("foo: 1\n")
    res = _cli("--config", str(bad), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and "not a composed bridgebench config" in res.stderr
    assert "Traceback" not in res.stderr
    bad.write_text("model: [unclosed\n")
    res = _cli("--config", str(bad), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and "cannot read config" in res.stderr and "Traceback" not in res.stderr


def test_cli_rejects_bf16(saved_cfg, tmp_path):
    res = _cli("--config", str(saved_cfg), "--out", str(tmp_path / "out"), "--dtype", "bf16")
    assert res.returncode == 2 and "use fp32" in res.stderr and "Traceback" not in res.stderr


def test_cli_rejects_an_unknown_matmul_precision(saved_cfg, tmp_path):
    res = _cli("--config", str(saved_cfg), "--out", str(tmp_path / "out"), "--fp32-matmul-prec", "fast")
    assert res.returncode == 2 and "--fp32-matmul-prec must be one of" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "out").exists()
