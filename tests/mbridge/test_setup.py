"""``bridgebench.mbridge.setup``'s import speed-ups change nothing but time: ``packages_distributions`` kept on disk
per set of installed distributions equals the stdlib's answer and is recomputed when a distribution appears."""

from __future__ import annotations

import importlib.metadata as md
import sys

from bridgebench import mbridge


def test_packages_distributions_cache_is_exact(tmp_path, monkeypatch):
    monkeypatch.setenv("BRIDGEBENCH_CACHE", str(tmp_path / "cache"))
    # the stdlib's own function: once mbridge.setup() ran in this process, md.packages_distributions is its wrapper
    real = getattr(md.packages_distributions, "_bridgebench_original", md.packages_distributions)
    fresh = real()
    calls = []

    def compute():
        calls.append(1)
        return dict(fresh)

    assert mbridge._packages_distributions_cached(compute) == fresh
    assert mbridge._packages_distributions_cached(compute) == fresh and len(calls) == 1  # second: from disk
    before = mbridge._installed_fingerprint()
    site = tmp_path / "site"
    (site / "newpkg-1.0.dist-info").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    assert mbridge._installed_fingerprint() != before
    mbridge._packages_distributions_cached(compute)
    assert len(calls) == 2  # a new distribution: computed again
