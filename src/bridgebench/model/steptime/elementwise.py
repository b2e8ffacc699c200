"""Memory-bound work of one layer per microbatch on one GPU: bytes that norms, residual adds, rotary embeddings,
activations, the router's softmax / top-k, the MoE permute / unpermute, FP8 casts and the loss move through HBM.

Time = bytes / (HBM bandwidth x :data:`HBM_EFFICIENCY` x ``level``) with ``level`` the software level of the
point's group at its release (fusions improve from release to release; :mod:`bridgebench.model.steptime.release`).
Bytes per token,
forward, BF16 activations (2 B), each op reading its inputs and writing its outputs once (what a fused kernel does;
unfused chains move more, which ``e`` absorbs):

- sequence shard (``T_sp`` tokens): two RMSNorms ``2 x (2h + 2h)`` (module ``layernorm``), two residual adds
  ``2 x (4h + 2h)``; MLA's q / kv norms on the compressed widths ``4 (q_lora + kv_lora)``;
- attention (``T`` tokens): rotary embedding of q and k, ``4 x (rotary dims of q and k per GPU)``;
- dense MLP: the activation, SwiGLU ``2 (2f) + 2f = 6f`` / TP bytes (plain ``4f``);
- MoE: router softmax / top-k in FP32 ``16 E`` (on ``T_sp``); the fused permute writes each routed copy and the
  unpermute reads it back (``2h`` each per copy, ``T_sp x topk x ETP`` copies per GPU; the token read and the
  weighted sum's write ``2h`` each per token); the experts' activation ``6 f_e / ETP`` per
  copy (module ``moe_act``); the shared expert's ``6 f_s / TP``; with the ``alltoall`` dispatcher and more than
  one expert per GPU, the received copies' sort by local expert and back (``sort_chunks_by_idxs``:
  :data:`SORT_CHUNKS_PASSES` x ``(2h + 2h)`` per copy, and the same again in the backward, :data:`PERMUTE_FWD_BWD`);
- FP8 / MXFP8 / NVFP4: the quantization of the GEMMs' operands is :mod:`bridgebench.model.steptime.quantize`'s
  (forward inputs and backward output gradients; not in these bytes);
- the loss: logits in FP32, written, read by the loss, gradient written: ``12 V / TP`` bytes per token for
  forward and backward together.

The backward moves twice the forward bytes (each op reads its saved input and the incoming gradient and writes the
outgoing one): forward + backward = 3x forward. Sources: the activation accounting of Korthikanti et al. 2022
(arXiv 2205.05198, Sec. 4.1, the tensors each op stores) and Megatron-Core 0.19.2's fused kernels
(``fusions/fused_bias_swiglu.py``, ``transformer/moe/moe_utils.py::permute``); these byte counts are first-principles
values, not measured here.
"""

from __future__ import annotations

from functools import lru_cache

from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime import registry
from bridgebench.model.steptime.gemm import MATERIALIZED_ATTENTION, LayerShape, tokens

#: Fraction of the datasheet HBM bandwidth a streaming kernel reaches (STREAM-like copies on H100 / B200 reach
#: ~80-90 %: NVIDIA's "CUDA C++ Best Practices Guide", effective bandwidth); first-principles value.
HBM_EFFICIENCY = 0.8
#: Forward + backward bytes over forward bytes of an element-wise op (see the module docstring).
FWD_BWD = 3.0
#: HBM bytes per score element of a materialized attention core (16-bit scores, Megatron-LM's ``CoreAttention`` /
#: Megatron-Core ``DotProductAttention``: ``baddbmm`` -> ``FusedScaleMaskSoftmax`` -> dropout -> ``bmm``), forward:
#: scores written 2, softmax read 2 + written 2, dropout read 2 + written 2 + its mask 1, ``P V`` read 2;
#: backward: ``dP`` written 2, the dropped probabilities read for ``dV`` 2, dropout backward read 2 + mask 1 +
#: written 2, softmax backward read ``dP`` 2 + the saved probabilities 2 + written 2, ``dS`` read twice (``dQ``,
#: ``dK``) 4. First-principles counts; Korthikanti et al. 2022 (arXiv 2205.05198) Table 4's selective-recompute
#: overhead (the attention core's forward, 22B, 8 A100: 1.2-1.3 ms per layer) checks them
#: (``tests/model/test_steptime.py``).
SCORE_BYTES_FWD = 13.0
SCORE_BYTES_BWD = 19.0
#: Passes over the routed copies that the ``alltoall`` dispatcher's second permutation makes on the receiving GPU
#: when it holds more than one expert: ``sort_chunks_by_idxs`` orders the received copies by local expert before
#: the experts (``dispatch_postprocess``) and restores the source order after them (``combine_preprocess``), each
#: reading and writing every copy once (``2h + 2h`` bytes); a capacity-padded dispatch does the same with a
#: ``transpose().contiguous()``. megatron-core 0.19.2 ``transformer/moe/token_dispatcher.py``
#: (``MoEAlltoAllTokenDispatcher``); the ``flex`` dispatchers (DeepEP, HybridEP) permute inside their fused
#: dispatch / combine and make no such pass.
SORT_CHUNKS_PASSES = 2.0
#: Forward + backward bytes over forward bytes of a permutation: its backward is the inverse permutation of the
#: gradient, one read and one write (not the 2x of an element-wise op that reads its saved input).
PERMUTE_FWD_BWD = 2.0


@lru_cache(maxsize=4096)
def layer_bytes(sid: int, kind: str, sh: LayerShape) -> tuple[tuple[str, float], ...]:
    """Forward + backward HBM bytes per microbatch on one GPU of one layer of ``kind`` (``dense``, ``moe``,
    ``mtp_dense``, ``mtp_moe``, or ``logits``), by module (``layernorm``, ``moe_act``, ``other``)."""
    spec = registry.get(sid)
    t, tsp = tokens(spec, sh)
    h, tp = spec.hidden_size, sh.tp
    if kind == "logits":
        v = spec.padded_vocab_size(tp) / tp
        return (("other", 12.0 * v * t * (1 + spec.mtp_layers)),)
    norms = 8.0 * h * tsp
    other = 12.0 * h * tsp
    if spec.multi_latent_attention:
        rope = spec.qk_pos_emb_head_dim
        other += 4.0 * ((spec.q_lora_rank or 0) + spec.kv_lora_rank) * tsp
        other += 4.0 * (spec.num_attention_heads / tp + 1) * rope * t
    else:
        d = spec.head_dim
        other += 4.0 * (spec.num_attention_heads / tp + max(spec.query_groups / tp, 1.0)) * d * t
    act_per = 6.0 if spec.gated_linear_unit else 4.0
    moe_act = sorted_copies = 0.0
    if kind.endswith("moe"):
        e_num = spec.num_moe_experts or 1
        fe = spec.moe_ffn_hidden_size or spec.ffn_hidden_size
        copies = tsp * spec.moe_router_topk * sh.etp
        other += 16.0 * e_num * tsp + 4.0 * h * copies + 4.0 * h * tsp
        moe_act = act_per * fe / sh.etp * copies
        sorted_copies = copies * SORT_CHUNKS_PASSES if sort_chunks(spec, sh) else 0.0
        fs = spec.moe_shared_expert_intermediate_size or 0
        other += act_per * fs / tp * t
    else:
        f = spec.ffn_hidden_size
        other += act_per * f / tp * t
    if kind.startswith("mtp"):
        other += 12.0 * h * t  # eh_proj's concatenation and the extra norms
    other += PERMUTE_FWD_BWD / FWD_BWD * 4.0 * h * sorted_copies  # returned x FWD_BWD: PERMUTE_FWD_BWD in all
    return (("layernorm", FWD_BWD * norms), ("moe_act", FWD_BWD * moe_act), ("other", FWD_BWD * other))


def sort_chunks(spec: ModelSpec, sh: LayerShape) -> bool:
    """Whether an MoE layer's received copies go through ``sort_chunks_by_idxs`` (:data:`SORT_CHUNKS_PASSES`):
    the ``alltoall`` dispatcher with more than one local expert (``num_moe_experts / EP > 1``)."""
    return sh.dispatcher == "alltoall" and spec.local_experts(sh.ep) > 1


def score_bytes(sid: int, sh: LayerShape) -> tuple[float, float]:
    """(forward, backward) HBM bytes per microbatch on one GPU of a materialized attention core's score matrices
    (``mbs x heads / TP x (s / CP) x s`` elements at :data:`SCORE_BYTES_FWD` / :data:`SCORE_BYTES_BWD`); (0, 0) for
    a flash-style ``attention_backend`` (the scores stay on chip)."""
    if sh.attention_backend not in MATERIALIZED_ATTENTION:
        return 0.0, 0.0
    spec = registry.get(sid)
    t, _ = tokens(spec, sh)
    elements = t * spec.seq_length * spec.num_attention_heads / sh.tp
    return SCORE_BYTES_FWD * elements, SCORE_BYTES_BWD * elements
