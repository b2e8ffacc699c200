"""HBM bytes that quantizing the GEMM operands of an FP8, MXFP8 or NVFP4 layer moves, per microbatch on one GPU.

Transformer Engine runs a low-precision GEMM on quantized operands and quantizes each activation operand itself
(transformer-engine 2.x ``pytorch/module/linear.py``, ``layernorm_linear.py``, ``grouped_linear.py``):

- forward, the input ``X`` of every GEMM (``M x K`` elements), with a row-wise copy for the forward GEMM and a
  column-wise one (Hopper: a transpose) kept for the weight gradient -- except where the input is a norm's output
  that the norm kernel itself writes quantized (``LayerNormLinear``: the attention's fused QKV, the dense MLP's fc1,
  MLA's q / kv up-projections behind their own norms: :data:`NORM_FUSED`; counted as free);
- backward, the gradient of every GEMM's output ``dY`` (``M x N``), again row-wise for the data gradient and
  column-wise for the weight gradient.

Under sequence parallelism Transformer Engine quantizes before its all-gather, so the gathered operands -- a
column-parallel layer's input, a row-parallel layer's output gradient -- are quantized on the sequence shard
(``T / TP`` rows; ``gather_along_first_dim(..., quantizer=...)``). The weights are quantized once per step (cached
across microbatches) and are not counted. GEMMs that run in BF16 (the router, the output layer unless
``fp8_output_proj``) quantize nothing.

Bytes per quantized element (:data:`BYTES_PER_ELEMENT`; first-principles counts of the kernels' reads and writes):
FP8 with per-tensor current scaling (the recipes' ``fp8_cs``; NVIDIA's published H100 FP8 rows since 25.11) reads
the BF16 tensor once for its amax and once to cast, and writes two 1-byte copies: 2 + 2 + 1 + 1 = 6; MXFP8 computes
its 32-element block scales in the cast: 2 + 1 + 1 + 2 x 1/32; NVFP4 reads once for the tensor's global amax, once
to cast, and writes two 4-bit copies with an FP8 scale per 16 elements: 2 + 2 + 0.5 + 0.5 + 2 x 1/16.
"""

from __future__ import annotations

from functools import lru_cache

from bridgebench.model.steptime import registry
from bridgebench.model.steptime.gemm import Gemm, LayerShape, attention_gemms, mlp_gemms, mtp_gemms, tokens

#: bytes moved per quantized element, by peak key (module docstring)
BYTES_PER_ELEMENT = {"fp8": 6.0, "mxfp8": 2.0 + 2.0 + 2.0 / 32, "nvfp4": 2.0 + 2.0 + 1.0 + 2.0 / 16}
#: GEMMs whose input is a norm's output written quantized by Transformer Engine's ``LayerNormLinear``
#: (megatron-core 0.19.2 ``models/gpt/gpt_layer_specs.py``: ``TELayerNormColumnParallelLinear`` for ``linear_qkv``,
#: ``linear_fc1`` of a dense MLP, and MLA's ``linear_q_up_proj`` / ``linear_kv_up_proj`` with their q / kv norms)
NORM_FUSED = frozenset({"qkv", "fc1", "q_up_proj", "kv_up_proj"})
#: column-parallel GEMMs whose input Transformer Engine all-gathers under sequence parallelism
COLUMN_PARALLEL = frozenset({"qkv", "q_proj", "q_up_proj", "kv_up_proj", "fc1", "shared.fc1", "eh_proj"})
#: row-parallel GEMMs whose output gradient it all-gathers in the backward under sequence parallelism
ROW_PARALLEL = frozenset({"proj", "fc2", "shared.fc2"})


def _elements(g: Gemm, t: float, tsp: float) -> tuple[float, float]:
    """(forward input, backward output-gradient) elements quantized for one GEMM (all ``count`` of them)."""
    x_rows = tsp if g.name in COLUMN_PARALLEL and g.m == t else g.m
    dy_rows = tsp if g.name in ROW_PARALLEL else g.m
    x = 0.0 if g.name in NORM_FUSED else x_rows * g.k * g.count
    return x, dy_rows * g.n * g.count


@lru_cache(maxsize=4096)
def quantize_bytes(sid: int, kind: str, sh: LayerShape) -> tuple[float, float]:
    """(forward, backward) HBM bytes per microbatch on one GPU that quantizing the low-precision GEMMs' operands of
    one layer of ``kind`` (``dense``, ``moe``, ``mtp_dense``, ``mtp_moe``) moves (module docstring); (0, 0) in BF16
    or for another kind (the output layer: :func:`bridgebench.model.steptime.gemm.logits_gemms`)."""
    per = BYTES_PER_ELEMENT.get(sh.peak_key)
    if per is None or kind not in ("dense", "moe", "mtp_dense", "mtp_moe"):
        return 0.0, 0.0
    spec = registry.get(sid)
    t, tsp = tokens(spec, sh)
    gemms = attention_gemms(spec, sh) + mlp_gemms(spec, sh, kind.endswith("moe"))
    if kind.startswith("mtp"):
        gemms += mtp_gemms(spec, sh)
    fwd = bwd = 0.0
    for g in gemms:
        if g.peak_key == sh.peak_key:
            x, dy = _elements(g, t, tsp)
            fwd, bwd = fwd + per * x, bwd + per * dy
    return fwd, bwd
