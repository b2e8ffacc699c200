"""Which composed-config key each sweep stage reads, by the short name of its column in ``points.parquet``.

Declared once here; every stage (``bridgebench.sweep``) and the rows read values through these names.
"""

from __future__ import annotations

import re

from bridgebench.config.time_knobs import TIME_KEYS

#: short column name -> config key of the values every stage reads.
KEYS = {
    "num_gpus": "num_gpus",
    "gbs": "train.global_batch_size",
    "mbs": "train.micro_batch_size",
    "tp": "model.tensor_model_parallel_size",
    "pp": "model.pipeline_model_parallel_size",
    "vp": "model.virtual_pipeline_model_parallel_size",
    "cp": "model.context_parallel_size",
    "ep": "model.expert_model_parallel_size",
    "etp": "model.expert_tensor_parallel_size",
    "sequence_parallel": "model.sequence_parallel",
    "layout": "model.pipeline_model_parallel_layout",
    "first_stage_layers": "model.num_layers_in_first_pipeline_stage",
    "last_stage_layers": "model.num_layers_in_last_pipeline_stage",
    "account_embedding": "model.account_for_embedding_in_pipeline_split",
    "account_loss": "model.account_for_loss_in_pipeline_split",
    "seq_length": "model.seq_length",
    "recompute_granularity": "model.recompute_granularity",
    "recompute_method": "model.recompute_method",
    "recompute_num_layers": "model.recompute_num_layers",
    "recompute_modules": "model.recompute_modules",
    "optimizer": "optimizer.optimizer",
    "use_distributed_optimizer": "optimizer.use_distributed_optimizer",
    "ddp_use_distributed_optimizer": "ddp.use_distributed_optimizer",
    "overlap_param_gather": "ddp.overlap_param_gather",
    "ddp_grad_reduce_in_fp32": "ddp.grad_reduce_in_fp32",
    "mp_grad_reduce_in_fp32": "mixed_precision.grad_reduce_in_fp32",
    "fp8_param_gather": "mixed_precision.fp8_param_gather",
    "reuse_grad_buf": "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag",
    "precision": "precision.name",
    "peak_key": "precision.peak",
    "gpu": "gpu.name",
    "gpus_per_node": "gpu.gpus_per_node",
    "compute_capability": "gpu.compute_capability",
    "nvlink_domain": "gpu.nvlink_domain",
    "segment_policy": "gpu.segment_policy",
    "cuda_graph_impl": "model.cuda_graph_impl",
    "cuda_graph_scope": "model.cuda_graph_scope",
    "min_compute_capability": "precision.min_compute_capability",
    "job_type": "job.type",
    "job_layers": "job.layers",
    "job_experts": "job.experts",
    "ns_steps": "optimizer.muon_num_ns_steps",
    "muon_tp_mode": "optimizer.muon_tp_mode",
    "muon_split_qkv": "optimizer.muon_split_qkv",
    "ns_kernel": "accounting.ns_kernel",
    "flops_formula": "accounting.flops_formula",
    "release": "release.name",
    "recipe": "recipe_meta.name",
    "recipe_release": "recipe_meta.release",
    # memory (bridgebench.model.memory): loss fusion, Megatron-FSDP, optimizer dtypes and offloading
    "ce_fusion": "model.cross_entropy_loss_fusion",
    "cpu_offloading": "model.cpu_offloading",
    "cpu_offloading_num_layers": "model.cpu_offloading_num_layers",
    "cpu_offloading_activations": "model.cpu_offloading_activations",
    "fine_grained_offloading": "model.fine_grained_activation_offloading",
    "offload_modules": "model.offload_modules",
    "use_megatron_fsdp": "ddp.use_megatron_fsdp",
    "fsdp_strategy": "ddp.data_parallel_sharding_strategy",
    "fsdp_double_buffer": "ddp.fsdp_double_buffer",
    "precision_aware_optimizer": "optimizer.use_precision_aware_optimizer",
    "main_params_dtype": "optimizer.main_params_dtype",
    "exp_avg_dtype": "optimizer.exp_avg_dtype",
    "exp_avg_sq_dtype": "optimizer.exp_avg_sq_dtype",
    "optimizer_cpu_offload": "optimizer.optimizer_cpu_offload",
    "optimizer_offload_fraction": "optimizer.optimizer_offload_fraction",
    "alloc_conf": "env_vars.PYTORCH_CUDA_ALLOC_CONF",
    "hbm_total_mib": "gpu.hbm_total_mib",
    # not a Megatron-Core setting and not in the config schema (a composed config cannot carry it): whose FSDP /
    # recompute semantics the memory model takes, megatron when unset; torchtitan or deepspeed only in points built
    # in code to check the model against those frameworks' published runs (benchmarks/validate_memory_published.py;
    # bridgebench.model.memory.FRAMEWORKS)
    "framework": "framework.name",
    **TIME_KEYS,  # the time model's recipe knobs (bridgebench.config.time_knobs)
}
#: keys whose values must be positive integers (``None`` allowed for the optional ones).
POSITIVE = {
    "num_gpus": False,
    "train.global_batch_size": False,
    "train.micro_batch_size": False,
    "model.tensor_model_parallel_size": False,
    "model.pipeline_model_parallel_size": False,
    "model.context_parallel_size": False,
    "model.expert_model_parallel_size": False,
    "model.seq_length": False,
    "model.virtual_pipeline_model_parallel_size": True,
    "model.expert_tensor_parallel_size": True,
    "model.recompute_num_layers": True,
    "model.num_layers_in_first_pipeline_stage": True,
    "model.num_layers_in_last_pipeline_stage": True,
    "job.layers": False,
    "job.experts": False,
    "job.repeats": False,
}
#: env vars the capability rules read (``rules.Point.from_config``), as Point field -> env_vars key.
RULE_ENV = {
    "env_nvlink_domain_size": "NVLINK_DOMAIN_SIZE",
    "env_use_mnnvl": "USE_MNNVL",
    "env_hybrid_ep_ranks_per_nvlink_domain": "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN",
}
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")
#: the pipeline-split keys ``pipeline_model_parallel_layout: auto`` derives per point
SPLIT_KEYS = ("layout", "first_stage_layers", "last_stage_layers", "account_embedding", "account_loss")
#: the value of a key that is derived per point (``pipeline_model_parallel_layout``, ``sequence_parallel``)
AUTO = "auto"
