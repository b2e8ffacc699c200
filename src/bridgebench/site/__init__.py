"""The results site (``bridgebench site``): static HTML pages that open from ``file://`` with no network -- Table 1,
the published release histories, your runs, sweeps and the model's validation -- one module per page
(:mod:`.table1`, :mod:`.releases`, :mod:`.runs`, :mod:`.sweeps`, :mod:`.validation`), the shared frame in
:mod:`.layout`, the whole build and its index in :mod:`.build`. Sits above ``launch`` / ``validation`` and below the
CLI (pyproject.toml's import-linter contract)."""

from bridgebench.site.build import BuiltSite, SiteBuildError, build_site
from bridgebench.site.layout import MAX_PAGE_BYTES, PAGES

__all__ = ["MAX_PAGE_BYTES", "PAGES", "BuiltSite", "SiteBuildError", "build_site"]
