"""GPU x precision x system rules: ``precision_needs_gpu`` (the precision's minimum compute capability) and
``nvlink_env_matches_gpu`` (the NVLink env vars against the GPU's NVLink domain). Sources: :data:`RULES`
(:mod:`bridgebench.config.rules.table`)."""

from __future__ import annotations

from bridgebench.config.rules.point import Point, Violation

#: GPU architecture by compute-capability major version (messages only).
_ARCH = {8: "Ampere/Ada", 9: "Hopper", 10: "Blackwell", 12: "Blackwell (consumer)"}


def _arch(cc: float) -> str:
    return _ARCH.get(int(cc), f"sm_{int(cc * 10)}")


def system_violations(p: Point) -> list[Violation]:
    """GPU x precision x system: precision_needs_gpu and nvlink_env_matches_gpu (see :data:`RULES`)."""
    out = []
    cc, need = p.compute_capability, p.min_compute_capability
    if cc is not None and need is not None and float(cc) < float(need):
        out.append(
            Violation(
                "precision_needs_gpu",
                f"precision {p.precision} needs compute capability >= {float(need):.1f} ({_arch(float(need))}); "
                f"gpu {p.gpu or '?'} has {float(cc):.1f} ({_arch(float(cc))})",
            )
        )
    domain = p.nvlink_domain
    if domain is None:
        return out
    size, mnnvl, ranks = p.env_nvlink_domain_size, p.env_use_mnnvl, p.env_hybrid_ep_ranks_per_nvlink_domain
    for name, value in (
        ("NVLINK_DOMAIN_SIZE", size),
        ("USE_MNNVL", mnnvl),
        ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", ranks),
    ):
        if value is not None and (type(value) is not int or value < 0):
            out.append(Violation("nvlink_env_matches_gpu", f"env {name}={value!r} is not a non-negative integer"))
    if type(size) is int and size != domain:
        out.append(
            Violation(
                "nvlink_env_matches_gpu",
                f"env NVLINK_DOMAIN_SIZE={size} but gpu {p.gpu or '?'} has an NVLink domain of {domain} GPUs",
            )
        )
    if mnnvl == 1 and domain <= p.gpus_per_node:
        out.append(
            Violation(
                "nvlink_env_matches_gpu",
                f"env USE_MNNVL=1 (multi-node NVLink) but gpu {p.gpu or '?'} has an NVLink domain of {domain} GPUs "
                f"= one node of {p.gpus_per_node}: only NVL72-class systems span nodes",
            )
        )
    if type(ranks) is int and ranks > domain:
        out.append(
            Violation(
                "nvlink_env_matches_gpu",
                f"env NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={ranks} exceeds gpu {p.gpu or '?'}'s NVLink domain "
                f"of {domain} GPUs",
            )
        )
    return out
