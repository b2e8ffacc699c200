"""The rules table, declared once: every validity rule bridgebench checks, as a :class:`Rule` (stable id, the upstream
source that enforces it, a one-line summary); the longer explanation of each is in ``docs/rules.md``. Versions:
parallelism rules follow megatron-core 0.19.2 / megatron-bridge 0.6.2 (paths relative to ``site-packages/megatron/``);
the Muon rules reproduce the Megatron-Bridge v0.3.1 perf recipe (NeMo 26.02).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rule:
    """One validity rule: a stable ``id``, the upstream ``source`` that enforces it, a one-line ``summary``."""

    id: str
    source: str
    summary: str


#: every rule, by id (explanations: docs/rules.md)
RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "positive_int",
            "bridgebench (sizes must be positive integers)",
            "sizes are positive integers (mtp_num_layers may be 0)",
        ),
        Rule(
            "world_size",
            "megatron/core/parallel_state.py initialize_model_parallel; "
            "megatron/bridge/training/config.py ConfigContainer.get_data_parallel_size",
            "num_gpus is divisible by TP x PP x CP",
        ),
        Rule(
            "expert_grid",
            "megatron/core/parallel_state.py initialize_model_parallel (expert rank generator)",
            "num_gpus is divisible by ETP x EP x PP (integer expert data-parallel size)",
        ),
        Rule(
            "ep_needs_moe",
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__",
            "EP > 1 needs a MoE model",
        ),
        Rule(
            "experts_divisible",
            "megatron/core/transformer/moe/moe_layer.py BaseMoELayer.__init__",
            "EP divides num_moe_experts",
        ),
        Rule(
            "gbs_divisible",
            "megatron/core/num_microbatches_calculator.py ConstantNumMicroBatchesCalculator",
            "GBS is divisible by MBS x DP",
        ),
        Rule(
            "microbatches_interleaved",
            "megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving",
            "with the interleaved schedule, GBS / (MBS x DP) is a multiple of PP",
        ),
        Rule(
            "layers_fit_pp_vp",
            "megatron/core/transformer/transformer_block.py get_num_layers_to_build; "
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ (uneven PP)",
            "decoder layers split over PP x VP stages (even, or the uneven-PP branches)",
        ),
        Rule(
            "pipeline_split_conflict",
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__",
            "layout, first/last-stage layer counts and account_for_* exclude each other",
        ),
        Rule(
            "layout_syntax",
            "megatron/core/transformer/pipeline_parallel_layer_layout.py parse_str_to_list",
            "pipeline_model_parallel_layout follows Megatron-Core's grammar",
        ),
        Rule(
            "layout_stages",
            "megatron/core/transformer/pipeline_parallel_layer_layout.py __init__; "
            "TransformerConfig.__post_init__ (VP vs layout)",
            "the layout has PP x VP stages",
        ),
        Rule(
            "layout_layers",
            "megatron/core/transformer/pipeline_parallel_layer_layout.py validate_layer_layout",
            "one E first, one L last, num_layers t, mtp_num_layers m in the last virtual stage",
        ),
        Rule(
            "heads_divisible_tp",
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__",
            "num_attention_heads is divisible by TP",
        ),
        Rule(
            "query_groups_divisible_tp",
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__",
            "num_query_groups is a multiple or a divisor of TP",
        ),
        Rule(
            "sequence_parallel_needs_tp",
            "megatron/core/model_parallel_config.py ModelParallelConfig.__post_init__",
            "sequence_parallel needs TP > 1",
        ),
        Rule(
            "vp_needs_pp",
            "megatron/core/parallel_state.py initialize_model_parallel",
            "a VP size needs PP > 1",
        ),
        Rule(
            "seq_divisible_cp",
            "megatron/bridge/training/config.py ConfigContainer.validate",
            "with CP > 1, seq_length is divisible by 2 x CP",
        ),
        Rule(
            "seq_divisible_tp_sp",
            "megatron/core/tensor_parallel/mappings.py _split_along_first_dim",
            "with sequence parallelism, seq_length is divisible by TP x CP",
        ),
        Rule(
            "gpus_per_node",
            "bridgebench (whole nodes, or one partial node)",
            "jobs use whole nodes, or one partial node that divides gpus_per_node",
        ),
        Rule(
            "muon_dist_optimizer",
            "Megatron-Bridge v0.3.1 recipes/kimi/kimi_k2.py + scripts/performance/configs/kimi/"
            "kimi_llm_pretrain.py; megatron-core 55ac7082 core/optimizer/muon.py, "
            "training/arguments.py; bridge 0.6.2 _validate_and_sync_distributed_optimizer_settings",
            "Muon needs optimizer.use_distributed_optimizer = ddp.use_distributed_optimizer = false",
        ),
        Rule(
            "muon_overlap_param_gather",
            "Megatron-Bridge v0.3.1 recipes/kimi/kimi_k2.py; megatron-core 55ac7082 training/arguments.py",
            "Muon needs ddp.overlap_param_gather = false",
        ),
        Rule(
            "muon_fp8_param_gather",
            "Megatron-Bridge v0.3.1 scripts/performance/configs/kimi/kimi_llm_pretrain.py set_kimi_k2_common_configs",
            "Muon under MXFP8 needs mixed_precision.fp8_param_gather = false",
        ),
        Rule(
            "muon_reuse_grad_buf",
            "Megatron-Bridge v0.3.1 scripts/performance/configs/kimi/kimi_llm_pretrain.py set_kimi_k2_common_configs",
            "Muon under MXFP8 needs reuse_grad_buf_for_mxfp8_param_ag = false",
        ),
        Rule(
            "reuse_grad_buf_needs_fp8_param_gather",
            "megatron/core/distributed/distributed_data_parallel_config.py __post_init__",
            "reuse_grad_buf_for_mxfp8_param_ag needs fp8_param_gather",
        ),
        Rule(
            "mxfp8_param_gather_needs_reuse_grad_buf",
            "megatron/bridge/training/config.py ConfigContainer.validate",
            "under MXFP8, fp8_param_gather needs reuse_grad_buf_for_mxfp8_param_ag",
        ),
        Rule(
            "fp8_param_gather_needs_fp8",
            "megatron/bridge/training/mixed_precision.py (fp8_param = fp8_param_gather); "
            "TransformerConfig.__post_init__",
            "fp8_param_gather needs an FP8 precision",
        ),
        Rule(
            "precision_needs_gpu",
            "Transformer Engine 2.x transformer_engine/pytorch/quantization.py (fp8.py before 2.8) "
            "check_fp8_support / check_mxfp8_support / check_nvfp4_support; compute capabilities: CUDA C++ "
            "Programming Guide, 'Compute Capabilities' table",
            "the GPU's compute capability (configs/gpu) reaches the precision's minimum (configs/precision): "
            "MXFP8 and NVFP4 need Blackwell (10.0), FP8 needs 8.9",
        ),
        Rule(
            "nvlink_env_matches_gpu",
            "Megatron-Bridge 0.6.2 recipes/moonlight/h100/moonlight_16b.py (NVLINK_DOMAIN_SIZE 8, USE_MNNVL 0) and "
            "recipes/qwen/gb200/qwen3_moe.py (72, 1); v0.3.1 scripts/performance/perf_plugins.py",
            "HybridEP's NVLINK_DOMAIN_SIZE is the GPU system's NVLink domain, USE_MNNVL=1 only where the domain spans "
            "nodes (NVL72), NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN fits the domain",
        ),
        Rule(
            "secret_in_config",
            "bridgebench (README 'Secrets': jobs get credentials from the submitting environment); token formats: "
            "GitHub ghp_/gho_/ghu_/ghs_/ghr_/github_pat_, Hugging Face hf_, OpenAI/Anthropic sk-, Slack xox?-, "
            "AWS AKIA/ASIA key ids, Google AIza, GitLab glpat-, NVIDIA nvapi-, PEM private keys, JWTs",
            "no environment variable whose name (TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL ...) or value looks like "
            "a credential goes into a config, plan or script",
        ),
        Rule(
            "env_resolver",
            "bridgebench (README 'Secrets'); OmegaConf 2.3 resolvers oc.env / oc.decode read the environment at "
            "resolve time, and plans, scripts and records hold resolved values",
            "no value read from the environment or a file by a resolver is written: env_vars.NAME: ${oc.env:VAR} is "
            "passed by name (the job reads $VAR on the node), BRIDGEBENCH_*/SLURM_* settings resolve, the rest is "
            "refused",
        ),
        Rule(
            "shell_safe_value",
            "bridgebench launch/shellsafe.py; nemo-run 0.11.1 core/execution/slurm.py SlurmBatchRequest.materialize "
            "(srun words unquoted: noquote is an alias of str; export lines as given; #SBATCH via shlex.quote)",
            "every value that reaches sbatch, srun, an #SBATCH line or the job script matches a strict grammar "
            "(names, paths, mounts, image, time, memory, env names, job ids) or is quoted (env values, wrapper words)",
        ),
        Rule(
            "ssh_host_key",
            "OpenSSH ssh_config(5) StrictHostKeyChecking / UserKnownHostsFile; bridgebench launch/tunnel.py (fabric "
            "3.2 Connection sets paramiko's AutoAddPolicy, which accepts any host key)",
            "the login node's host key is in the known_hosts file the cluster names (cluster.tunnel.known_hosts, "
            "default ~/.ssh/known_hosts) and equals it; an unknown key is pinned only with "
            "cluster.tunnel.accept_new_host_key=true (said when it happens), a different key is always refused",
        ),
        Rule(
            "ssh_identity_private",
            "OpenSSH sshconnect2.c / authfile.c sshkey_perm_ok ('UNPROTECTED PRIVATE KEY FILE!': a private key "
            "readable by group or others is ignored)",
            "the ssh identity file (cluster.tunnel.identity) is a regular file that neither group nor others can "
            "read or write (chmod 600)",
        ),
        Rule(
            "cluster_nodes",
            "bridgebench (configs/cluster/<name>.yaml nodes, and sinfo's node count of the partition); SLURM keeps "
            "such a job PENDING forever (reason PartitionNodeLimit / PartitionConfig)",
            "the run's nodes fit the cluster's partition",
        ),
        Rule(
            "cluster_gpus",
            "bridgebench (configs/cluster/<name>.yaml gpu, gpus_per_node)",
            "a GPU run goes to a cluster whose nodes carry that GPU, enough of them per node",
        ),
        Rule(
            "cluster_container",
            "bridgebench (configs/cluster/<name>.yaml pyxis); pretrain runs need the release's NeMo container",
            "a pretrain run goes to a cluster that can start containers (pyxis/enroot)",
        ),
        Rule(
            "collect_partial",
            "bridgebench launch/collect.py (job folders are written by the job: untrusted input); exit code 5",
            "an attempt collect cannot read (symlink loop, a result file that is not the payload's object, logs not "
            "fetched, a clashing record) is set aside with its reason; the rest are collected; exit code 5",
        ),
        # upstream start-up assertions judged by bridgebench.config.rules.upstream (Megatron-Core, Megatron-Bridge's
        # performance launcher, the MoE dispatchers)
        Rule(
            id="hybridep_ep_domain",
            source="Megatron-Bridge v0.3.1 scripts/performance/perf_plugins.py PerfEnvPlugin._set_nvl_domain_size "
            "('assert ep_size <= 72'); HEAD 067f987d scripts/performance/utils/utils.py "
            "apply_target_topology_environment and utils/overrides.py (ValueError 'HybridEP expert parallel size must "
            "not exceed the 72-rank NVLink domain.')",
            summary="HybridEP on an NVL72 system (GB200/GB300): EP <= the 72-GPU NVLink domain",
        ),
        Rule(
            id="hybridep_ranks_per_domain",
            source="DeepEP hybrid-ep branch deep_ep/hybrid_ep_buffer.py HybridEPBuffer.__init__ (assert group size % "
            "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN == 0; the env overrides the detected value); megatron-core "
            "0.19.2 transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher (group = expert TP x EP ranks); "
            "the env as Megatron-Bridge v0.3.1 perf_plugins.py _set_nvl_domain_size sets it (EP on NVL72, "
            "min(EP, 8) on NVL8)",
            summary="HybridEP: the ETP x EP group is a multiple of the ranks per NVLink domain, and as the scheduler "
            "places the job every domain holds a multiple of them (bridgebench.model.placement)",
        ),
        Rule(
            id="moe_tp_needs_sp",
            source="megatron-core 0.19.2 transformer/moe/moe_layer.py MoELayer.forward (ValueError in training when "
            "the attention TP group > 1 without sequence_parallel); training/yaml_arguments.py ('When using MoE and "
            "tensor parallelism, sequence parallelism must be used.'); model_parallel_config.py warns for EP > 1",
            summary="a MoE model with TP > 1 needs model.sequence_parallel=true",
        ),
        Rule(
            id="ep_overlap_needs_vp",
            source="megatron-core 0.19.2 transformer/transformer_config.py TransformerConfig.__post_init__ ('If "
            "enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when "
            "pipeline_model_parallel_size > 1'; a pipeline_model_parallel_layout's VP counts, set earlier in the same "
            "__post_init__)",
            summary="comm_overlap.overlap_moe_expert_parallel_comm with PP > 1 needs a virtual pipeline size",
        ),
        Rule(
            id="fp8_output_proj_needs_mxfp8",
            source="megatron-core 0.19.2 transformer/transformer_config.py TransformerConfig.__post_init__ "
            "('fp8_output_proj must be used together with fp8 mode', 'fp8_output_proj requires fp8_recipe=mxfp8'); "
            "models/gpt/gpt_model.py builds TELMHeadColumnParallelLinear only if fp8_utils.is_mxfp8_output_proj_active",
            summary="model.fp8_output_proj (the output layer in MXFP8) needs the MXFP8 recipe",
        ),
        Rule(
            id="deepep_falls_back",
            source="Megatron-Bridge 0.6.2 / v0.3.1 src/megatron/bridge/training/flex_dispatcher_backend.py "
            "apply_flex_dispatcher_backend (DeepEP only on compute capability 8.x / 9.x or NVIDIA B200 / B300; other "
            "GPUs: a rank-0 warning and 'Falling back to alltoall'); NVIDIA-NeMo/Megatron-Bridge#5992",
            summary="DeepEP requested on GB200 / GB300 runs the alltoall dispatcher: priced as alltoall and said so "
            "(never a prune)",
        ),
        Rule(
            id="enum_value",
            source="megatron-core 0.19.2 transformer/transformer_config.py (Literal field types and __post_init__: "
            "recompute_granularity, recompute_method, recompute_modules allowed set, moe_token_dispatcher_type, "
            "moe_flex_dispatcher_backend, cuda_graph_impl; cp_comm_type docstring and Transformer Engine's attention)",
            summary="enum settings take one of upstream's values (did-you-mean on a misspelling), checked before "
            "anything is priced",
        ),
        Rule(
            "yaml_bounds",
            "bridgebench config/bounds.py (PyYAML 6 yaml.compose node graph; 'billion laughs', CVE-2003-1564 class)",
            "a user config file is at most 1 MiB and expands to at most 100,000 YAML nodes with its aliases followed",
        ),
        Rule(
            "config_name_confined",
            "bridgebench config/bounds.py (Hydra 1.3 loads <group>/<option>.yaml from the search path as named)",
            "an option name is a file name of its group (no '/' or '..', also with @package); a user config file or "
            "group folder does not link out of $BRIDGEBENCH_CONFIG_DIR",
        ),
        Rule(
            "config_range",
            "bridgebench config/bounds.py (pydantic); megatron/core/transformer/transformer_config.py __post_init__ "
            "(kv_channels = hidden_size // num_attention_heads; num_attention_heads % num_query_groups)",
            "model sizes positive and under stated caps (4096 layers, 2^20 hidden, 2^16 experts ...), hidden_size "
            "divisible by num_attention_heads without kv_channels; GPU peaks, memory and bandwidths positive; "
            "cluster counts in range",
        ),
        Rule(
            "sweep_space_cap",
            "bridgebench config/sweep/space.py (each stage keeps its point rows in memory)",
            "a search space holds at most 200,000 points, counted from the axes' lengths before any is built",
        ),
        Rule(
            "out_is_folder",
            "bridgebench cli/app.py out_folder",
            "--out names a folder; an existing file there is refused, never written over",
        ),
        Rule(
            "config_value_missing",
            "bridgebench cli/quiet.py missing_value (omegaconf MissingMandatoryValue: a value left '???')",
            "a config value the command reads is set: '???' is OmegaConf's marker for a value the user must set",
        ),
        Rule(
            "sweep_state_corrupt",
            "bridgebench launch/sweep.py (state.json: which stages are done, what was planned and submitted)",
            "sweep --resume refuses a state.json that is not the JSON object a sweep writes (a corrupt stage file "
            "is redone instead)",
        ),
    )
}

#: rules judged on a composed config or on a cluster, not on a :class:`Point` (config/secrets.py and
#: config/cluster_fit.py); every other rule is judged by :func:`check`.
NON_POINT_RULES = frozenset(
    {
        "secret_in_config",
        "env_resolver",
        "shell_safe_value",
        "ssh_host_key",
        "ssh_identity_private",
        "cluster_nodes",
        "cluster_gpus",
        "cluster_container",
        "collect_partial",
        "enum_value",  # config/schema.py check_sections, at compose and for every swept value
        "deepep_falls_back",  # a pricing note (config/time_knobs.py), never a violation
        "yaml_bounds",
        "config_name_confined",
        "config_range",
        "sweep_space_cap",
        "out_is_folder",
        "sweep_state_corrupt",
        "config_value_missing",
    }
)
