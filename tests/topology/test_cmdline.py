"""Engine command lines parsed as the engines' own argument parsers would."""

from __future__ import annotations

import shlex

import pytest

from bubblewatch.topology._launchers import detect_engine
from bubblewatch.topology._tokenise import EngineArgsError
from bubblewatch.topology.cmdline import parse_engine_cmdline


def parse(cmd: str, env=None):
    cfg = parse_engine_cmdline(shlex.split(cmd), env)
    assert cfg is not None, cmd
    return cfg


@pytest.mark.parametrize(
    ("cmd", "engine"),
    [
        ("python -m sglang.launch_server --model-path m", "sglang"),
        ("python3 -m sglang.launch_server --model-path m", "sglang"),
        ("/usr/bin/python3.11 -u -X dev -m sglang.launch_server", "sglang"),
        ("sglang serve --model-path m", "sglang"),
        ("/opt/venv/bin/vllm serve m", "vllm"),
        ("python -m vllm.entrypoints.openai.api_server --model m", "vllm"),
        ("python3 /usr/local/bin/vllm serve m", "vllm"),
        ("trtllm-serve /models/x", "trtllm"),
        ("env CUDA_VISIBLE_DEVICES=1 trtllm-serve /models/x", "trtllm"),
        ("python train.py", None),
        ("python -c 'import sglang'", None),
        ("vllm bench serve", None),
        ("sglang::scheduler_PP0", None),
        ("", None),
    ],
)
def test_recognises_launchers(cmd, engine):
    assert detect_engine(shlex.split(cmd)) == engine


def test_not_an_engine_is_none():
    assert parse_engine_cmdline(["bash"]) is None


@pytest.mark.parametrize(
    "flags",
    [
        "--tp-size 2 --pp-size 4",
        "--tensor-parallel-size=2 --pipeline-parallel-size=4",
        "--tp 2 --pp-size=4",
        "--tp 8 --tp-size 2 --pp-size 4",  # the last occurrence wins
    ],
)
def test_sglang_aliases(flags):
    cfg = parse(f"python -m sglang.launch_server --model-path m {flags}")
    assert (cfg.tp_size, cfg.pp_size) == (2, 4)


def test_sglang_defaults_from_design_notes():
    cfg = parse("python -m sglang.launch_server --model-path m")
    assert cfg.pp_async_batch_depth == 0
    assert cfg.pp_max_micro_batch_size is None
    assert cfg.cuda_graph is True
    assert (cfg.port, cfg.host, cfg.metrics_enabled) == (30000, "127.0.0.1", False)
    assert (cfg.base_gpu_id, cfg.gpu_id_step, cfg.ep_size) == (0, 1, 1)


def test_sglang_flags_that_matter():
    cfg = parse(
        "python -m sglang.launch_server --model-path m --pp-size 8 --pp-async-batch-depth 8 "
        "--pp-max-micro-batch-size 16 --disable-cuda-graph --ep 4 --max-running-requests 128 "
        "--base-gpu-id 2 --gpu-id-step 1 --port 31000 --host 10.0.0.5 --enable-metrics "
        "--chunked-prefill-size 4096 --trust-remote-code --mem-fraction-static 0.85"
    )
    assert cfg.pp_async_batch_depth == 8
    assert cfg.pp_max_micro_batch_size == 16
    assert cfg.cuda_graph is False
    assert cfg.ep_size == 4
    assert cfg.max_running_requests == 128
    assert cfg.base_gpu_id == 2
    assert (cfg.port, cfg.host, cfg.metrics_enabled) == (31000, "10.0.0.5", True)
    # Unknown flags are kept, with values or as booleans.
    assert cfg.flags["--chunked-prefill-size"] == "4096"
    assert cfg.flags["--trust-remote-code"] is True
    assert cfg.flags["--mem-fraction-static"] == "0.85"


def test_layer_partition_and_visible_devices_from_env():
    cfg = parse(
        "python -m sglang.launch_server --pp-size 4",
        {"SGLANG_PP_LAYER_PARTITION": "16, 16,15,14", "CUDA_VISIBLE_DEVICES": "3,2,1,0"},
    )
    assert cfg.layer_partition == (16, 16, 15, 14)
    assert cfg.cuda_visible_devices == ("3", "2", "1", "0")


def test_empty_cuda_visible_devices_means_no_devices():
    cfg = parse("vllm serve m", {"CUDA_VISIBLE_DEVICES": ""})
    assert cfg.cuda_visible_devices == ()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SGLANG_PP_LAYER_PARTITION": "16,16,16"}, "has 3 entries but the pipeline has 4 stages"),
        ({"SGLANG_PP_LAYER_PARTITION": "16,x,16,16"}, "comma-separated integers"),
        ({"SGLANG_PP_LAYER_PARTITION": "16,0,16,16"}, "entries must be >= 1"),
    ],
)
def test_bad_layer_partition_is_a_clear_error(env, message):
    with pytest.raises(EngineArgsError, match=message) as info:
        parse_engine_cmdline(shlex.split("python -m sglang.launch_server --pp-size 4"), env)
    assert info.value.field == "SGLANG_PP_LAYER_PARTITION"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--pp-size two", "--pp-size expects an integer, got 'two'"),
        ("--tp-size 0", "--tp-size must be >= 1, got 0"),
        ("--base-gpu-id -1", "--base-gpu-id must be >= 0"),
        ("--port 70000", "--port must be 1..65535"),
        ("--pp-size", "--pp-size expects a value"),
        ("--nnodes 2 --node-rank 2", "--node-rank 2 is not below --nnodes 2"),
    ],
)
def test_malformed_values_name_the_flag(flags, message):
    with pytest.raises(EngineArgsError, match=message):
        parse_engine_cmdline(
            shlex.split(f"python -m sglang.launch_server {flags}"), where="/proc/9/cmdline"
        )


def test_error_says_where_it_came_from():
    with pytest.raises(EngineArgsError) as info:
        parse_engine_cmdline(["sglang", "serve", "--tp", "x"], where="/proc/9/cmdline")
    assert (
        str(info.value)
        == "/proc/9/cmdline: field '--tp-size': --tp-size expects an integer, got 'x'"
    )


def test_vllm_flags():
    cfg = parse(
        "vllm serve meta-llama/Llama-3.1-70B -tp 2 -pp=4 -dp 2 --max-num-seqs 256 "
        "--async-scheduling --host 0.0.0.0"
    )
    assert (cfg.tp_size, cfg.pp_size, cfg.dp_size) == (2, 4, 2)
    assert cfg.model == "meta-llama/Llama-3.1-70B"
    assert cfg.max_running_requests == 256
    assert cfg.async_scheduling is True
    assert cfg.cuda_graph is True and cfg.cudagraph_mode is None
    assert (cfg.port, cfg.metrics_enabled) == (8000, True)
    assert cfg.pp_async_batch_depth is None


def test_vllm_negated_boolean():
    cfg = parse("vllm serve m --async-scheduling --no-async-scheduling --no-enforce-eager")
    assert cfg.async_scheduling is False
    assert cfg.cuda_graph is True


def test_vllm_enforce_eager_turns_graphs_off():
    cfg = parse("vllm serve m --enforce-eager")
    assert (cfg.cuda_graph, cfg.cudagraph_mode) == (False, "NONE")


@pytest.mark.parametrize(
    ("flags", "mode", "graphs"),
    [
        ("""-O '{"cudagraph_mode": "PIECEWISE"}'""", "PIECEWISE", True),
        ("""--compilation-config '{"cudagraph_mode":"NONE"}'""", "NONE", False),
        (
            """--compilation-config='{"cudagraph_mode":"FULL_AND_PIECEWISE","level":3}'""",
            "FULL_AND_PIECEWISE",
            True,
        ),
        ("""-cc '{"cudagraph_mode": "full_decode_only"}'""", "FULL_DECODE_ONLY", True),
        ("-O.cudagraph_mode=NONE", "NONE", False),
        ("-cc.cudagraph_mode FULL", "FULL", True),
        ("--compilation-config.cudagraph_mode=PIECEWISE", "PIECEWISE", True),
        ("-O0", "NONE", False),
        ("-O 0", "NONE", False),
        ("-O3", None, True),
    ],
)
def test_vllm_compilation_config(flags, mode, graphs):
    cfg = parse(f"vllm serve m {flags}")
    assert cfg.cudagraph_mode == mode
    assert cfg.cuda_graph is graphs


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("-O '{not json'", "expects JSON"),
        ("-O '[1, 2]'", "expects a JSON object"),
        ("""-O '{"cudagraph_mode": "SOMETIMES"}'""", "cudagraph_mode must be one of"),
    ],
)
def test_vllm_bad_compilation_config(flags, message):
    with pytest.raises(EngineArgsError, match=message):
        parse(f"vllm serve m {flags}")


def test_vllm_layer_partition_env():
    cfg = parse("vllm serve m -pp 2", {"VLLM_PP_LAYER_PARTITION": "40,40"})
    assert cfg.layer_partition == (40, 40)


def test_vllm_expert_parallel_spans_tp_times_dp():
    assert parse("vllm serve m -tp 4 -dp 2 --enable-expert-parallel").ep_size == 8


def test_trtllm_flags():
    cfg = parse(
        "trtllm-serve /models/llama --tp_size 4 --pp_size=2 --ep_size 2 --max_batch_size 64 "
        "--host 0.0.0.0 --port 8123 --backend pytorch"
    )
    assert (cfg.tp_size, cfg.pp_size, cfg.ep_size) == (4, 2, 2)
    assert cfg.max_running_requests == 64
    assert cfg.model == "/models/llama"
    assert (cfg.port, cfg.host) == (8123, "0.0.0.0")
    assert cfg.flags["--backend"] == "pytorch"


def test_secrets_are_redacted_before_parsing():
    cfg = parse(
        "python -m sglang.launch_server --api-key sk-live0123456789abcdefgh "
        "--hf-token=hf_abcdefghijklmnopqrst",
        {"HF_TOKEN": "hf_abcdefghijklmnopqrst", "SGLANG_API_KEY": "plainsecret"},
    )
    text = repr(cfg) + repr(cfg.to_dict())
    for secret in ("sk-live0123456789abcdefgh", "hf_abcdefghijklmnopqrst", "plainsecret"):
        assert secret not in text
    assert cfg.flags["--api-key"] == "<redacted>"
    assert cfg.env == {"SGLANG_API_KEY": "<redacted>"}


def test_env_prefix_in_command_line_counts_as_environment():
    cfg = parse(
        "env CUDA_VISIBLE_DEVICES=2,3 SGLANG_PP_LAYER_PARTITION=30,31 "
        "python -m sglang.launch_server --pp-size 2"
    )
    assert cfg.cuda_visible_devices == ("2", "3")
    assert cfg.layer_partition == (30, 31)
