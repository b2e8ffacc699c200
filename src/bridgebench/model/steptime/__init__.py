"""The step-time model, split by concern (one module per term; ``predict`` composes them).

========================  =========================================================================================
module                    what it prices
========================  =========================================================================================
``config``                the inputs: GPU datasheet facts, one point with its recipe knobs
``collectives``           the alpha-beta time of a ring / all-to-all / point-to-point transfer
``gemm``                  per-layer GEMMs and the attention core at a shape-dependent efficiency
``elementwise``           HBM-bound work (norms, activations, router, permute, loss)
``quantize``              the FP8 / MXFP8 / NVFP4 operands' quantization (forward inputs, backward gradients)
``tp_comm``               sequence-parallel all-gather / reduce-scatter per layer; what ``tp_comm_overlap`` hides
``cp_comm``               the context-parallel KV exchange by ``cp_comm_type``
``ep_comm``               MoE dispatch / combine by dispatcher, NVLink or scale-out
``pp``                    the pipeline bubble with interleaving and the stage sends
``dp_comm``               dense / expert data-parallel reduction and gathering, by overlap flags and buckets
``recompute``             the forward work activation recomputation repeats
``optimizer``             AdamW; Muon's Newton-Schulz, layer-wise deal, TP mode, param all-gather
``release``               the software level of a release (Gaussian process over published releases)
``calibration``           the fitted and hand-set constants
``fit``                   fitting on the published tables, held-out experiments (leave one release / configuration
                          / group / model and GPU / model / GPU out)
``bands``                 conformal bands by distance from the calibration (50 / 68 / 90 %)
``predict``               :func:`predict_time`: all terms of one point, TFLOP/s/GPU, band, release
``muon``                  :func:`muon_cost`: Muon's overhead and its what-ifs
========================  =========================================================================================

Callers import each name from its module (``bridgebench.model.steptime.predict.predict_time``, ...): the model has
one name, ``steptime``.
"""
