"""The records facts are made of: evidence types, findings, stages, GPUs, engine, training, derived.

Each is a Struct of documented fields (bubblewatch.rules._schema_types); the
root (bubblewatch.rules.schema) puts them together.
"""

from __future__ import annotations

from bubblewatch.rules._schema_types import (
    Field,
    FieldType,
    ListOf,
    Scalar,
    Struct,
    list_of,
    map_of,
    scalar,
)

# Types of the detector's evidence keys (docs of each come from EVIDENCE_KEYS itself).
EVIDENCE_TYPES: dict[str, FieldType] = {
    "signal": Scalar("string"),
    "pp_size": Scalar("int"),
    "tp_size": Scalar("int"),
    "concurrency": Scalar("double"),
    "bubble_ratio": Scalar("double"),
    "mean_occupancy_ratio": Scalar("double"),
    "lag_rank_correlation": Scalar("double"),
    "spin_ratio": Scalar("double"),
    "launch_bound_index": Scalar("double"),
    "imbalance_ratio": Scalar("double"),
    "imbalanced_stage": Scalar("int"),
    "straggler_gpu": Scalar("int"),
    "throttle_reasons": ListOf(Scalar("string", nullable=False)),
    "bubble_energy_j": Scalar("double"),
    "topology_agreement": Scalar("bool"),
    "running_requests": Scalar("double"),
    "running_requests_source": Scalar("string"),
    "micro_batch_requests": Scalar("double"),
    "queued_requests": Scalar("double"),
    "pipeline_evidence": Scalar("string"),
    "stagger_p_value": Scalar("double"),
    "concurrency_uncertainty": Scalar("double"),
    "micro_batches_in_flight": Scalar("double"),
    "micro_batches_allowed": Scalar("int"),
    "expected_bubble_ratio": Scalar("double"),
    "expected_formula": Scalar("string"),
    "schedule_efficiency_ratio": Scalar("double"),
    "measured_bubble_ratio": Scalar("double"),
    "schedule_excess_ratio": Scalar("double"),
    "schedule_judgement": Scalar("string"),
    "excess_cause": Scalar("string"),
    "excess_stage": Scalar("int"),
    "imbalance_bubble_ratio": Scalar("double"),
    "step_period_s": Scalar("double"),
    "stage_busy_s": ListOf(Scalar("double", nullable=False)),
    "wave_order": ListOf(Scalar("int", nullable=False)),
    "wave_rank_correlation": Scalar("double"),
    "holding_gpus": ListOf(Scalar("int", nullable=False)),
    "waiting_gpus": ListOf(Scalar("int", nullable=False)),
    "collective_wait_s": Scalar("double"),
    "collective_wait_energy_j": Scalar("double"),
}

FINDING = Struct(
    "finding",
    {
        "verdict": scalar("string", "the finding's verdict", nullable=False),
        "confidence": scalar("double", "0..1", nullable=False),
        "summary": scalar("string", "the detector's sentence", nullable=False),
        "stage": scalar("int", "stage the finding is about, or null"),
        "gpu": scalar("int", "GPU the finding is about, or null"),
    },
)

STAGE = Struct(
    "stage",
    {
        "stage": scalar("int", "stage index, 0 first", nullable=False),
        "gpus": list_of("int", "GPU indices of the stage"),
        "occupancy_ratio": scalar("double", "share of the window the stage was doing work"),
        "sm_active_ratio": scalar("double", "mean SM activity"),
        "kernel_busy_ratio": scalar("double", "mean kernel-busy ratio (utilization.gpu)"),
        "power_w": scalar("double", "mean power"),
        "idle_power_w": scalar("double", "estimated idle power"),
        "spin_ratio": scalar("double", "share of time in NCCL spin (kernel busy, SMs idle)"),
        "lag_s": scalar("double", "lag of load changes behind stage 0"),
        "bubble_energy_j": scalar("double", "energy above idle spent not doing useful work"),
        "time_share_ratio": scalar(
            "double", "this stage's share of the summed stage occupancies (0..1)"
        ),
    },
)

GPU = Struct(
    "gpu",
    {
        "index": scalar("int", "NVML index", nullable=False),
        "name": scalar("string", "GPU model name, or null"),
        "power_limit_w": scalar("double", "power limit, or null"),
        "stage": scalar("int", "pipeline stage of this GPU, or null"),
    },
)

# A training job's layout and schedule (built by bubblewatch.rules.training_facts).
TRAINING_SUGGEST = Struct(
    "training_suggest",
    {
        "micro_batches": scalar(
            "int", "micro-batches per step to aim for: 4 x pp_size (null: none)"
        ),
        "micro_batch_size": scalar(
            "int", "micro batch size that gives them at the same global batch, if it divides"
        ),
        "global_batch_size": scalar("int", "global batch that gives them at the same micro batch"),
        "gradient_accumulation_steps": scalar("int", "DeepSpeed: the same as micro_batches"),
        "bubble_ratio": scalar("double", "the schedule's bubble with those micro-batches"),
        "virtual_stages": scalar(
            "int", "model chunks per rank for an interleaved schedule, or null"
        ),
        "layers_per_virtual_stage": scalar(
            "int", "Megatron --num-layers-per-virtual-pipeline-stage for them, or null"
        ),
        "bubble_ratio_interleaved": scalar(
            "double", "the bubble with the interleaved schedule at the current micro-batches"
        ),
        "first_stage_layers": scalar(
            "int", "layers for the first stage that balance measured stage times, or null"
        ),
        "last_stage_layers": scalar("int", "layers for the last stage likewise, or null"),
    },
)

PROCESS = Struct(
    "process",
    {
        "known": scalar(
            "bool", "true where no engine was found and one process holds several GPUs", False
        ),
        "runtime": scalar(
            "string", "'llama.cpp', 'ollama', 'transformers', 'python', 'unknown', or null"
        ),
        "split": scalar(
            "string", "llama.cpp's --split-mode ('layer' when absent), else 'unknown', or null"
        ),
        "tensor_split": list_of("double", "llama.cpp's --tensor-split proportions, per device"),
        "gpus": list_of("int", "the GPUs it holds memory on"),
        "layer_order": list_of("int", "its GPUs in the order of their layer blocks, if known"),
        "layer_order_source": scalar(
            "string",
            "what says so: '--tensor-split and memory per GPU', 'CUDA_VISIBLE_DEVICES', "
            "'device index', or null",
        ),
    },
)

TRAINING = Struct(
    "training",
    {
        "known": scalar("bool", "true for a discovered training job", nullable=False),
        "framework": scalar("string", "'megatron', 'nemo', 'deepspeed', 'torchtitan' or 'torch'"),
        "launcher": scalar("string", "'torchrun', 'deepspeed', 'accelerate', 'srun', 'none'"),
        "pipeline": scalar("bool", "true when pp_size > 1", nullable=False),
        "schedule": scalar("string", "the schedule as the framework names it"),
        "schedule_kind": scalar("string", "'none', 'fill_drain', 'interleaved' or 'zero_bubble'"),
        "pp_size": scalar("int", "pipeline stages"),
        "tp_size": scalar("int", "tensor-parallel size"),
        "dp_size": scalar("int", "data-parallel replicas"),
        "cp_size": scalar("int", "context-parallel size"),
        "ep_size": scalar("int", "expert-parallel size"),
        "virtual_stages": scalar("int", "model chunks per rank (1: not interleaved)"),
        "micro_batch_size": scalar("int", "samples per micro-batch"),
        "global_batch_size": scalar("int", "samples per optimizer step"),
        "micro_batches": scalar("int", "m: micro-batches each pipeline runs per step"),
        "num_layers": scalar("int", "transformer layers, when the flags say"),
        "config_file": scalar("string", "the config file the layout was read from, or null"),
        "expected_bubble_ratio": scalar(
            "double", "the schedule's bubble: (p-1)/(m+p-1), (p-1)/(v*m+p-1), 0 for zero-bubble"
        ),
        "expected_formula": scalar("string", "that formula with the job's numbers"),
        "suggest": Field(TRAINING_SUGGEST, "figures for the fixes"),
    },
)

ENGINE = Struct(
    "engine",
    {
        "known": scalar("bool", "true when the engine configuration is known", False),
        "argv_known": scalar("bool", "true when the command line is known", False),
        "name": scalar("string", "'sglang', 'vllm', 'trtllm', or null"),
        "version": scalar(
            "string",
            "engine version (discovered from its site-packages or endpoint, or "
            "given with --engine-version, else the one its live read-back reports), or null",
        ),
        "version_known": scalar("bool", "true when the version is known", False),
        "flag_table": scalar(
            "string",
            "the release whose flag table judges this version's command line "
            "(docs/topology.md), or null when none applies",
        ),
        "accepted_flags": map_of(
            "bool",
            "every flag spelling the version's parser accepts (value: true when "
            "deprecated); empty when no flag table applies",
        ),
        "graphs_off_by": list_of("string", "the flags, as given, that turn CUDA graphs off"),
        "problems": list_of("string", "what the version's parser would refuse in the command line"),
        "graph_bs_flag": scalar(
            "string",
            "the spelling of the decode CUDA-graph batch-size flag this version "
            "accepts (SGLang --cuda-graph-max-bs, --cuda-graph-max-bs-decode from "
            "0.5.14), or null",
        ),
        "live_update": scalar(
            "bool",
            "true when the running server takes pp_max_micro_batch_size live "
            "(SGLang POST /set_internal_state, 0.5.3.post1+)",
            False,
        ),
        "base_url": scalar("string", "the engine's HTTP server, or null"),
        "pp_size": scalar("int", "pipeline-parallel size"),
        "tp_size": scalar("int", "tensor-parallel size"),
        "ep_size": scalar("int", "expert-parallel size"),
        "pp_async_batch_depth": scalar("int", "SGLang --pp-async-batch-depth"),
        "pp_max_micro_batch_size": scalar("int", "SGLang --pp-max-micro-batch-size (null: unset)"),
        "micro_batch_size": scalar(
            "int",
            "effective micro-batch cap: pp_max_micro_batch_size, else "
            "max(max_running_requests // pp_size, 1); null if unknown",
        ),
        "micro_batch_slots": scalar(
            "int",
            "SGLang micro-batch slots, pp_size + pp_async_batch_depth (pp_loop_size); "
            "null for other engines",
        ),
        "batches_in_flight": scalar(
            "int",
            "vLLM's max_concurrent_batches for this release and flags: pp_size + 1 with "
            "async scheduling and the V2 model runner (0.23+), else pp_size (one stage: 2 "
            "with async scheduling); null for other engines or an unknown version",
        ),
        "async_scheduling": scalar(
            "bool",
            "vLLM async scheduling in force: the flag, else the release's default (off "
            "in 0.12, on from 0.19.1); null for other engines or an unknown version",
        ),
        "batches_why": scalar(
            "string", "which release's model gave batches_in_flight, and why (vLLM)"
        ),
        "requests_ceiling": scalar(
            "int",
            "most requests the limits let run: min(max_running_requests, "
            "micro_batch_slots x micro_batch_size); null if neither is known",
        ),
        "micro_batch_cap_flag": scalar(
            "string",
            "the per-slot cap's flag as this release spells it (--max-micro-batch-size "
            "0.4.6.post2-0.5.3, --pp-max-micro-batch-size from 0.5.3.post1; the newest "
            "spelling when the version is unknown); null when the release has none",
        ),
        "cuda_graph": scalar("bool", "false when CUDA graphs are off"),
        "cudagraph_mode": scalar("string", "vLLM cudagraph_mode, or null"),
        "max_running_requests": scalar(
            "int", "--max-running-requests (SGLang) / --max-num-seqs (vLLM)"
        ),
        "layer_partition": Field(
            ListOf(Scalar("int", nullable=False), nullable=True),
            "layers per stage from *_PP_LAYER_PARTITION, or null",
        ),
        "num_layers": scalar("int", "model layers (sum of layer_partition), or null"),
        "flags": map_of(
            "string", "flags as given, long names, value as a string ('true' for a bare flag)"
        ),
        "env": map_of("string", "allow-listed, redacted environment"),
        "live_known": scalar(
            "bool",
            "true when the running engine's settings were read back (SGLang "
            "/server_info internal_states): pp_max_micro_batch_size, micro_batch_size, "
            "max_running_requests and pp_async_batch_depth are then the live values",
            False,
        ),
        "settings_source": map_of(
            "string",
            "where each of pp_max_micro_batch_size, micro_batch_size, max_running_requests "
            "and pp_async_batch_depth came from: 'live' (read back from the engine) or "
            "'cmdline' (its command line and defaults)",
        ),
        "live_cap_key": scalar(
            "string",
            "the engine's own name for the per-slot cap it reported "
            "(pp_max_micro_batch_size, max_micro_batch_size up to 0.5.3), or null",
        ),
    },
)

DERIVED = Struct(
    "derived",
    {
        "fill_gain_ratio": scalar(
            "double",
            "throughput factor if the pipeline were filled: "
            "min(pp_size, max(running, 1)) / concurrency; null if unknown",
        ),
        "requests_per_micro_batch": scalar(
            "double",
            "running requests per micro-batch in flight: "
            "evidence.micro_batch_requests where the engine counts one micro-batch, "
            "else load.running / max(evidence.concurrency, 1); about load.running "
            "when all share one",
        ),
        "requests_peak": scalar(
            "double",
            "the load a limit must hold: max(load.peak, load.running + load.queued); "
            "null if load.running is unknown",
        ),
        "micro_batch_cap_suggested": scalar(
            "int",
            "the per-slot cap that spreads the peak load over pp_size slots: "
            "max(ceil(requests_peak / pp_size), 1); null if unknown",
        ),
        "requests_ceiling_suggested": scalar(
            "int",
            "running requests the suggested cap allows: engine.micro_batch_slots x "
            "micro_batch_cap_suggested; null if unknown",
        ),
        "micro_batch_cap_depth_one": scalar(
            "int",
            "the per-slot cap that holds requests_peak with depth 1 (pp_size + 1 slots): "
            "max(pp_max_micro_batch_size, ceil(requests_peak / (pp_size + 1))); null "
            "when the cap is unset or the load unknown",
        ),
        "max_running_suggested": scalar(
            "int",
            "a request limit that holds the peak: ceil(requests_peak); null if unknown",
        ),
        "layer_partition_suggested": scalar(
            "string",
            "comma-separated layers per stage balancing the measured stage "
            "times; null unless the layer count is known",
        ),
        "stage_time_shares": scalar(
            "string", "comma-separated percent of summed stage time, per stage"
        ),
        "micro_batches_allowed": scalar(
            "double",
            "micro-batches the settings let be in flight: the engine's pp_size "
            "(a serving pipeline cannot use more), else min(m, p) of a given "
            "training schedule; null if unknown",
        ),
        "in_flight_ratio": scalar(
            "double",
            "evidence.micro_batches_in_flight / micro_batches_allowed: 1 when the "
            "pipeline is as full as its settings allow; null if unknown",
        ),
    },
)
