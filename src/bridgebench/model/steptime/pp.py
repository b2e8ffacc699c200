"""Pipeline parallelism: the schedule's bubble and the stage-to-stage sends.

- **Bubble** of 1F1B / interleaved 1F1B with ``m`` microbatches, ``PP`` stages and ``VP`` virtual chunks per rank:
  ``(PP - 1) / VP`` microbatch times of the busiest stage (Narayanan et al. 2021, arXiv 2104.04473, Sec. 2.2.2:
  bubble fraction ``(p - 1) / (v m)`` of ``m`` microbatch times).
- **Sends**: per boundary crossing the activation of one microbatch, ``MBS x s / CP / TP x h`` BF16 elements per GPU
  (each tensor-parallel rank sends its sequence shard; megatron-core 0.19.2 ``pipeline_parallel/p2p_communication.py``),
  forward activations and backward gradients, ``m x VP`` of each per rank per step. Without ``overlap_p2p_comm``
  (1F1B's ``send_forward_recv_backward`` waits) every transfer is on the critical path: ``2 m VP`` transfers;
  with it (Megatron-Bridge turns it on for VP > 1, ``training/comm_overlap.py``) only the fill and drain,
  ``2 (PP - 1)``. Neighbouring stages are ``N / PP`` ranks apart: NVLink when the whole job fits one NVLink domain,
  else the scale-out network.
"""

from __future__ import annotations

from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime import collectives
from bridgebench.model.steptime.config import TimeConfig

BYTES = 2.0


def bubble(per_microbatch: float, cfg: TimeConfig) -> float:
    """Seconds of pipeline bubble per step: ``(PP - 1) / VP`` times the busiest stage's per-microbatch time."""
    return (cfg.pp - 1) / (cfg.vp or 1) * per_microbatch if cfg.pp > 1 else 0.0


def transfer_seconds(spec: ModelSpec, cfg: TimeConfig) -> float:
    """One stage-to-stage transfer of one microbatch's activation (or its gradient) from one GPU."""
    tokens = cfg.mbs * spec.seq_length / cfg.cp / (cfg.tp if cfg.sp else 1)
    bw = cfg.link_of("pp")  # NVLink only when every stage-to-stage pair shares a domain as placed
    return collectives.send(tokens * spec.hidden_size * BYTES, bw, collectives.alpha(bw, cfg.gpu.nvlink_bandwidth))


def p2p_seconds(spec: ModelSpec, cfg: TimeConfig) -> float:
    """Exposed send/recv seconds per step on the critical path (see the module docstring); 0 with PP = 1."""
    if cfg.pp <= 1:
        return 0.0
    overlap = cfg.overlap_p2p_comm if cfg.overlap_p2p_comm is not None else (cfg.vp or 1) > 1
    count = 2 * (cfg.pp - 1) if overlap else 2 * cfg.num_microbatches * (cfg.vp or 1)
    return float(count * transfer_seconds(spec, cfg))
