"""What the comparison statistics share: the like-for-like fields, the run verdicts, the error and the library
versions every result records."""

from __future__ import annotations

from importlib import metadata

from bridgebench.errors import BridgebenchError

#: Recipe fields whose change makes two published rows not like-for-like (``RunRecord`` field names).
LIKE_FOR_LIKE_FIELDS: tuple[str, ...] = ("tp", "pp", "vp", "cp", "ep", "etp", "gbs", "mbs", "seq_length")
#: Published-row facts beside the parallel sizes that make two releases not like-for-like when they differ:
#: ``moe_token_drop`` (25.09's MoE rows were token-drop runs, later releases token-dropless; records.load_published).
PUBLISHED_RECIPE_FACTS: tuple[str, ...] = ("moe_token_drop",)
RUN_VERDICTS = ("faster", "slower", "no significant change", "insufficient", "no spread: cannot test")
#: the verdict when neither side varies at all (every value identical): no test can say how far to trust the ratio
NO_SPREAD = RUN_VERDICTS[-1]
#: Libraries whose versions every result records.
LIBRARIES = ("bridgebench", "numpy", "scipy", "pandas", "pyarrow", "arch", "ruptures", "matplotlib")


class CompareError(BridgebenchError):
    """Bad input to a comparison (the message names the rule): no overlap, unknown release, bad runs or parameters."""


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a comparison depends on (recorded in every result)."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out
