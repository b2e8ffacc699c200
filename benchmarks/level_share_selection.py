"""How the level of an unpublished model was chosen (bridgebench.model.steptime.release.ShareLevel), on NVIDIA's
published rows only, at the shipped calibration's efficiencies and host constants.

Prints, for each way of reading a held-out model's log level, the mean |log error| of its rows when each model is
left out in turn (its rows' implied log levels against what the other models' rows give): the family mean (dense /
MoE, shipped before stop 30), and least-squares lines in a non-GEMM share of the layers' work or of the whole step,
with and without a family intercept. Then the same line applied inside a group (a held-out configuration's level
shifted by ``slope x (its share - its group's)``), leaving one configuration and one release out, and the
leave-one-GPU-out MAPE of the shipped model (``fit.leave_out`` by GPU, the host constants fixed as in the bands'
folds).

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/level_share_selection.py`` (about 1-2 min on 2 cores).
"""

from __future__ import annotations

import math
import os
import statistics
import time

import numpy as np

from bridgebench.config import calibration
from bridgebench.model.steptime.config import config_key, family, group_key
from bridgebench.model.steptime.fit import calibrate, fit_levels, implied_level, leave_out
from bridgebench.model.steptime.predict import LAYER_TERMS, evaluate, point_release_index
from bridgebench.model.steptime.release import LevelTable
from bridgebench.validation.time_calibration import published_rows

NON_GEMM = ("ep_a2a", "overhead", "elementwise")
COVARIATES = {
    "share of ep_a2a + overhead + elementwise in the layers' work (shipped)": (NON_GEMM, "layers"),
    "the same over the whole step": (NON_GEMM, "step"),
    "share of ep_a2a + overhead in the whole step (stop 29's dispatch share)": (("ep_a2a", "overhead"), "step"),
    "share of all but compute in the whole step": (None, "step"),
}


def main() -> None:
    t0 = time.time()
    cal = calibration.load().time
    rows = published_rows()
    data = []
    for r in rows:
        eff = cal.efficiency[(r.cfg.gpu.name, r.cfg.precision_class)]
        lv = implied_level(r, eff, cal.c_layer, cal.kappa, cal.ns_efficiency, cal.host_moe, cal.host_moe_expert)
        if lv is None:
            continue
        c = cal
        terms = evaluate(r.spec, r.cfg, eff, c.c_layer, c.kappa, c.ns_efficiency, 1.0, c.host_moe, c.host_moe_expert)[0]
        data.append((r, math.log(lv), terms))
    print(f"published rows: {len(data)} of {len(rows)} with an implied level; load average {os.getloadavg()[0]:.1f}")

    def share(terms: dict[str, float], parts: tuple[str, ...] | None, over: str) -> float:
        den = sum(terms[k] for k in LAYER_TERMS) if over == "layers" else sum(terms.values())
        num = den - terms["compute"] if parts is None else sum(terms[k] for k in parts)
        return num / den

    models = sorted({r.spec.name for r, _, _ in data})
    print("leave one model out, mean |log error| of its rows' levels:")
    fam = []
    for m in models:
        rest = [(r, y) for r, y, _ in data if r.spec.name != m]
        for r, y, _ in data:
            if r.spec.name == m:
                fam.append(abs(y - statistics.mean(yy for rr, yy in rest if family(rr.spec) == family(r.spec))))
    print(f"  {'family mean (before stop 30)':74s} {statistics.mean(fam):.3f}")
    for name, (parts, over) in COVARIATES.items():
        s = [share(t, parts, over) for _, _, t in data]
        for with_family in (False, True):
            errs, slopes = [], []
            for m in models:
                train = [i for i, (r, _, _) in enumerate(data) if r.spec.name != m]
                x = np.array(
                    [[1.0, s[i]] + ([float(family(data[i][0].spec) == "moe")] if with_family else []) for i in train]
                )
                coef = np.linalg.lstsq(x, np.array([data[i][1] for i in train]), rcond=None)[0]
                slopes.append(coef[1])
                for i, (r, y, _) in enumerate(data):
                    if r.spec.name == m:
                        row = [1.0, s[i]] + ([float(family(r.spec) == "moe")] if with_family else [])
                        errs.append(abs(y - float(np.dot(coef, row))))
            label = name + (", family intercepts" if with_family else "")
            print(f"  {label:74s} {statistics.mean(errs):.3f}  (slopes {min(slopes):+.2f} .. {max(slopes):+.2f})")

    print("the shipped line inside groups (levels of the others shifted by b x share difference):")
    s = [share(t, NON_GEMM, "layers") for _, _, t in data]
    rs = [r for r, _, _ in data]
    for key_name, key in (("configuration", lambda r: config_key(r.spec, r.cfg)), ("release", lambda r: r.release)):
        for b in (0.0, -0.5, cal.level_share.slope if cal.level_share else -1.0):
            keys = [key(r) for r in rs]
            errs = []
            for v in set(keys):
                train = [i for i, k in enumerate(keys) if k != v]
                groups, fams = fit_levels([rs[i] for i in train], [data[i][1] - b * s[i] for i in train])
                table = LevelTable(groups=groups, family_mean=fams)
                for i, k in enumerate(keys):
                    if k == v:
                        p, _ = table.log_level(group_key(rs[i].spec, rs[i].cfg), family(rs[i].spec),
                                               point_release_index(rs[i].cfg))  # fmt: skip
                        errs.append(abs(p + b * s[i] - data[i][1]))
            print(f"  leave one {key_name} out, b = {b:+.2f}: {statistics.mean(errs):.4f}")

    fixed = dict(c_grid=(cal.c_layer,), host_grid=(cal.host_moe,), expert_grid=(cal.host_moe_expert,),
                 kappa=cal.kappa, ns_efficiency=cal.ns_efficiency, measured_rates=cal.measured_rates)  # fmt: skip
    pred, _, _ = leave_out(rows, lambda r: r.cfg.gpu.name, lambda tr: calibrate(tr, **fixed))
    errs = [abs(p / r.tflops - 1) for r, p in zip(rows, pred) if p]
    print(f"leave one GPU out (the shipped model): MAPE {100 * statistics.mean(errs):.1f}% over {len(errs)} rows")
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
