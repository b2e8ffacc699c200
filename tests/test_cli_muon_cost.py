"""``bridgebench muon-cost``: the release is printed and moves the answer; the Muon what-ifs are listed, SYRK
labelled hypothetical (the real CLI in a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

BB = [sys.executable, "-m", "bridgebench.cli"]


def _cost(release: str) -> dict:
    res = subprocess.run(
        [*BB, "muon-cost", "recipe=qwen3_30b_a3b_gb300_mxfp8", f"release={release}", "--json"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def test_muon_cost_names_its_release_and_each_release_has_its_number():
    early, late = _cost("26.02"), _cost("26.08")
    assert (early["release"], late["release"]) == ("26.02", "26.08")
    # published AdamW steps: 8.63 s (26.02) and 5.89 s (26.08); each within its band
    for out, published in ((early, 8.63), (late, 5.89)):
        assert abs(out["adamw_step_s"] / published - 1) <= out["band_pct"] / 100
    assert early["muon_step_s"] > early["adamw_step_s"]
    variants = {(w["assignment"], w["muon_tp_mode"], w["ns_kernel"]): w for w in early["what_ifs"]}
    assert len(variants) == 12
    assert variants[("ping_pong", "blockwise", "syrk")]["status"].startswith("hypothetical")
    assert variants[("cost_balanced", "blockwise", "gemm")]["status"].startswith("upstream after")
    assert variants[("ping_pong", "blockwise", "syrk")]["ns_s"] < variants[("ping_pong", "blockwise", "gemm")]["ns_s"]
    assert set(early["muon_terms_s"]) >= {"compute", "tp_comm", "cp_comm", "ep_a2a", "pp_p2p", "bubble", "dp_comm"}
