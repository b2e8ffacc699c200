"""Other frameworks' semantics in the memory model, to check it against their published runs (a point selects them
with ``MemoryConfig.framework``; no config key does): torchtitan [TT] (FSDP2, op-level selective activation
checkpointing, the upcast loss) and DeepSpeed ZeRO-3 [DS] (per-tensor gathering under the live-parameter cap).

Sources: [TT] torchtitan@9dec370 and [DS] DeepSpeed ZeRO-3, as listed in :mod:`bridgebench.model.memory`.
"""

from __future__ import annotations

from functools import lru_cache

from bridgebench.model.memory.config import MemoryConfig, MemoryModelError
from bridgebench.model.memory.state import StageState
from bridgebench.model.memory.tables import tables_of

#: bytes per logits element at torchtitan's loss peak: the bf16 logits, their fp32 copy and the fp32 log-softmax
#: output (``train.py`` ``loss_fn`` upcasts before ``cross_entropy``) [TT].
LOGITS_BYTES_TORCHTITAN = 10.0


@lru_cache(maxsize=4096)
def op_sac_per_token(tables_id: int, kind: int, tp: int, sp: bool) -> float:
    """Bytes one dense decoder layer keeps per token of the local microbatch under torchtitan's op-level selective
    activation checkpointing [TT]: the block input (the checkpoint's argument) and the outputs of the ops its
    policy must save -- ``aten.mm`` except every second one counted from 1 in call order (Llama's ``wq``, ``wk``,
    ``wv``, ``wo``, ``w1``, ``w3``, ``w2``: ``wq``, ``wv``, ``w1`` and ``w2`` saved; a non-gated MLP's ``w1`` only),
    the flash-attention output and its fp32 log-sum-exp, and each ``reduce_scatter_tensor`` output of the
    row-parallel ``wo`` / ``w2`` under TP with sequence parallelism. A row-parallel ``mm`` output is the full-width
    partial sum (``h``, not ``h / t``). All bf16 (2 B) but the log-sum-exp (4 B). The recomputed block's own full
    set is added once by the caller, as for full recompute.

    Raises:
        MemoryModelError: an MoE or MLA layer (torchtitan's Llama has neither; not modelled).
    """
    spec = tables_of(tables_id).spec
    if kind != 0 or spec.multi_latent_attention:
        raise MemoryModelError(
            "framework=torchtitan op-level selective activation checkpointing is modelled for dense GQA/MHA layers "
            "only (torchtitan's Llama); use recompute_granularity full or none for MoE / MLA layers"
        )
    h, n, d, g = spec.hidden_size, spec.num_attention_heads, spec.head_dim, spec.query_groups
    hs = h / tp if sp else h
    b = 2.0 * hs  # block input
    b += 2.0 * n * d / tp + 2.0 * g * d / tp  # mm 1 (wq) and mm 3 (wv)
    b += 2.0 * n * d / tp + 4.0 * n / tp  # flash attention: output and log-sum-exp
    f = spec.ffn_hidden_size
    b += 2.0 * f / tp  # mm 5 (w1)
    if spec.gated_linear_unit:
        b += 2.0 * h  # mm 7 (w2): the row-parallel partial sum before its reduce-scatter
    if tp > 1:
        b += 2 * 2.0 * hs  # reduce_scatter_tensor outputs of wo and w2 (sequence parallel)
    return b


def fsdp2_weights_grads(
    st: StageState, sharded: float, *, pp: int, vpad_h: int, has_emb: bool, has_loss: bool
) -> tuple[float, float]:
    """Weight and gradient bytes of one GPU under torchtitan's FSDP2 [TT], ``(weights, grads)``.

    fp32 shards (``sharded`` params per GPU, parameters and gradients). Gathered bf16: the root group (embedding,
    final norm, output: one all-gather, held from the forward's start and again through the backward, whose last step
    is the embedding's) with the current and the prefetched block -- or, under PP (``reshard_after_forward=False``),
    the stage's whole copy. Unsharded gradients: the output layer's bf16 one (the root reduce-scatters after the whole
    backward) and one block's bf16 gradient with its fp32 copy for the reduce-scatter (``reduce_dtype``).
    ``vpad_h``: the (TP-local) embedding / output-layer params ``V_pad h / t``.
    """
    root = vpad_h * (int(has_emb) + int(has_loss))
    gathered = st.n_all if pp > 1 else root + 2 * st.biggest_layer
    weights = 4.0 * sharded + 2.0 * gathered
    grads = 4.0 * sharded + 2.0 * vpad_h * int(has_loss) + (2.0 + 4.0) * st.biggest_layer
    return weights, grads


def zero3_weights_grads(
    st: StageState, sharded: float, cfg: MemoryConfig, extra_w: float, grad_b: float
) -> tuple[float, float]:
    """Weight and gradient bytes of one GPU under DeepSpeed ZeRO-3 [DS], ``(weights, grads)``: the largest parameter
    tensor gathered whole, plus what the prefetch bucket adds under the live-parameter cap (with quantized copies,
    ``extra_w`` B per element); unsharded fp16 gradients up to one reduce bucket plus the tensor that overflows it."""
    big = st.biggest_tensor
    live = big + min(cfg.zero3_prefetch_bucket_size, max(0, cfg.zero3_max_live_parameters - big))
    weights = 2.0 * sharded + (2.0 + extra_w) * live
    grads = grad_b * sharded + 2.0 * (cfg.zero3_reduce_bucket_size + big)
    return weights, grads
