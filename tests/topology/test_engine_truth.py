"""Command-line readings checked against the engines' sources (graphs off, aliases, stride)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.topology.cmdline import parse_engine_cmdline
from bubblewatch.topology.endpoint import metrics_url
from bubblewatch.topology.gpumap import GpuMapError, map_gpus
from bubblewatch.topology.probe import version_from_answer
from bubblewatch.topology.redact import REDACTED, redact_argv
from bubblewatch.topology.versions import installed_version

GPUS8 = [GpuInfo(index=i, uuid=f"GPU-{i:08x}-0000", name="GPU") for i in range(8)]


def parse(cmd: str, version: str | None = None):
    cfg = parse_engine_cmdline(shlex.split(cmd), version=version)
    assert cfg is not None, cmd
    return cfg


@pytest.mark.parametrize(
    ("flags", "off_by"),
    [
        ("-O0", ("-O",)),
        ("-O 0", ("-O",)),
        ("-O=0", ("-O",)),
        ("--optimization-level 0", ("--optimization-level",)),
        ("--optimization_level=0", ("--optimization-level",)),
        ("-cc.cudagraph_mode=NONE", ("-cc.cudagraph_mode",)),
        ("-cc.cudagraph_mode none", ("-cc.cudagraph_mode",)),
        ("--compilation-config.cudagraph_mode=NONE", ("--compilation-config.cudagraph_mode",)),
        ('--compilation-config \'{"cudagraph_mode": "NONE"}\'', ("--compilation-config",)),
        ("--compilation-config '{\"level\": 0}'", ("--compilation-config",)),
        ("--enforce-eager", ("--enforce-eager",)),
    ],
)
def test_vllm_graphs_off_in_every_spelling(flags, off_by):
    """Regression: -O0 / --optimization-level 0 / -cc.cudagraph_mode=NONE were read as graphs on."""
    cfg = parse(f"vllm serve m -pp 2 {flags}")
    assert cfg.cuda_graph is False
    assert cfg.cudagraph_mode == "NONE"
    assert cfg.graphs_off_by == off_by


@pytest.mark.parametrize(
    "flags", ["-O3", "-O 2", "--optimization-level 3", "-O0 -cc.cudagraph_mode=FULL"]
)
def test_vllm_graphs_stay_on(flags):
    assert parse(f"vllm serve m -pp 2 {flags}").cuda_graph is True


def test_vllm_underscores_device_ids_headless_and_stats():
    cfg = parse(
        "vllm serve m --tensor_parallel_size 2 --pipeline_parallel_size=2 --device-ids 2,3,5,7"
    )
    assert (cfg.tp_size, cfg.pp_size) == (2, 2)
    assert cfg.device_ids == ("2", "3", "5", "7")
    assert map_gpus(cfg, gpus=GPUS8).stages == ((2, 3), (5, 7))
    assert metrics_url(cfg) == "http://127.0.0.1:8000/metrics"
    assert metrics_url(parse("vllm serve m --headless")) is None
    # --disable-log-stats: no stat loggers, so /metrics has no request gauges.
    assert metrics_url(parse("vllm serve m --disable-log-stats")) is None


def test_vllm_ray_beyond_this_host_is_a_clear_error_not_a_traceback():
    cfg = parse("vllm serve m --distributed-executor-backend ray -tp 8 -pp 2")
    with pytest.raises(GpuMapError, match="Ray places them on the cluster's nodes"):
        map_gpus(cfg, gpus=GPUS8)
    # Fits on the host: rank order is assumed.
    small = parse("vllm serve m --distributed-executor-backend ray -tp 4 -pp 2")
    assert map_gpus(small, gpus=GPUS8).stages == ((0, 1, 2, 3), (4, 5, 6, 7))


@pytest.mark.parametrize(
    "cmd",
    [
        "trtllm-llmapi-launch trtllm-serve serve M --pp 8 --tp 1",
        "trtllm-serve M --pipeline_parallel_size 8",
        "trtllm-serve serve M --pp_size 8 --ep 4",
        "trtllm-serve M --pp_size 8 --moe_expert_parallel_size 4",
    ],
)
def test_trtllm_aliases_and_the_llmapi_wrapper(cmd):
    """Regression: `trtllm-llmapi-launch trtllm-serve serve M --pp 8` was read as pp_size 1."""
    cfg = parse(cmd)
    assert cfg.name == "trtllm" and cfg.pp_size == 8 and cfg.model == "M"


def test_trtllm_load_comes_from_its_json_iteration_stats():
    from bubblewatch.sources.engine_metrics import MetricsParseError, parse_load_figures

    assert metrics_url(parse("trtllm-serve M --pp_size 2 --port 8001")) == (
        "http://localhost:8001/metrics"
    )
    stats = (
        '[{"iter": 10, "numActiveRequests": 3, "numQueuedRequests": 1},'
        ' {"iter": 11, "numActiveRequests": 8, "numQueuedRequests": 0, "gpuMemUsage": 1}]'
    )
    assert parse_load_figures(stats) == (8.0, 0.0, None)
    with pytest.raises(MetricsParseError, match="enable_iter_perf_stats"):
        parse_load_figures("[]")


def test_sglang_pp_gauge_is_one_micro_batch_and_moe_ep_ranks_fold():
    """Regression: in PP mode num_running_reqs is the size of one micro-batch (so running
    is a lower bound, flagged by micro_batch); moe_ep_rank series were summed."""
    from bubblewatch.sources.engine_metrics import parse_load_figures

    pp = "\n".join(
        f'sglang:num_running_reqs{{pp_rank="{p}",tp_rank="0",moe_ep_rank="0"}} 1.0'
        for p in range(8)
    )
    figures = parse_load_figures("# TYPE sglang:num_running_reqs gauge\n" + pp + "\n")
    assert figures.micro_batch == 1.0 and figures.running == 1.0
    ep = "\n".join(
        f'sglang:num_running_reqs{{pp_rank="0",tp_rank="{r}",moe_ep_rank="{r}"}} 6.0'
        for r in range(8)
    )
    figures = parse_load_figures("# TYPE sglang:num_running_reqs gauge\n" + ep + "\n")
    assert figures.running == 6.0 and figures.micro_batch is None  # one stage: not PP


def test_sglang_data_parallel_replicas_stride_by_tp_pp_and_step():
    """SGLang's DataParallelController moves each replica tp * pp * gpu_id_step GPUs on.

    Regression: the stride was dp * pp * tp, which put replica 1 of `--tp 2 --dp-size 2
    --gpu-id-step 2` on GPUs 2 and 4 (replica 0 holds 0 and 2).
    """
    cfg = parse("python -m sglang.launch_server --tp 2 --dp-size 2 --gpu-id-step 2")
    assert map_gpus(cfg, gpus=GPUS8, dp_rank=0).stages == ((0, 2),)
    assert map_gpus(cfg, gpus=GPUS8, dp_rank=1).stages == ((4, 6),)
    cfg = parse("python -m sglang.launch_server --tp 2 --pp-size 2 --dp-size 2")
    assert map_gpus(cfg, gpus=GPUS8, dp_rank=1).stages == ((4, 5), (6, 7))


def test_sglang_attn_dp_size_runs_inside_one_tp_group():
    from bubblewatch.topology.discover import discover_from_cmdline

    res = discover_from_cmdline(
        shlex.split("python -m sglang.launch_server --tp 8 --attn-dp-size 8"), None, GPUS8
    )
    assert len(res.pipelines) == 1
    assert res.engine.attn_dp_size == 8


def test_sglang_graphs_off_by_the_per_phase_backend_flag():
    cfg = parse("python -m sglang.launch_server --pp-size 2 --cuda-graph-backend-decode disabled")
    assert cfg.cuda_graph is False and cfg.graphs_off_by == ("--cuda-graph-backend-decode",)
    assert parse("python -m sglang.launch_server --disable-cuda-graph").graphs_off_by == (
        "--disable-cuda-graph",
    )


def test_a_known_version_names_what_its_parser_would_refuse():
    cmd = "python -m sglang.launch_server --pp-size 2 --cuda-graph-max-bs 8"
    assert parse(cmd, "0.5.11").problems == ()
    (problem,) = parse(cmd, "0.5.20").problems
    assert "ambiguous" in problem and "--cuda-graph-max-bs-decode" in problem
    # Unknown version: nothing is claimed.
    assert parse(cmd).problems == ()


def test_env_assignments_before_the_command_parse_and_their_secrets_are_redacted():
    """Regression (issue 13): `HF_TOKEN=x python -m sglang.launch_server` was not an engine."""
    cfg = parse(
        "HF_TOKEN=hf_abcdefghijklmnopqrstu CUDA_VISIBLE_DEVICES=4,5 "
        "python -m sglang.launch_server --pp-size 2"
    )
    assert cfg.cuda_visible_devices == ("4", "5")
    assert cfg.argv[0] == f"HF_TOKEN={REDACTED}"
    assert "hf_abcdefghijklmnopqrstu" not in repr(cfg.to_dict())
    assert "HF_TOKEN" not in cfg.env


def test_a_secret_that_starts_with_a_dash_is_redacted():
    """Regression (issue 13): `--api-key -dashsecret123` kept the key."""
    out = redact_argv(["sglang", "--api-key", "-dashsecret123", "--port", "1", "-tp", "2"])
    assert out == ("sglang", "--api-key", REDACTED, "--port", "1", "-tp", "2")
    cfg = parse("python -m sglang.launch_server --api-key -dashsecret123 --pp-size 2")
    assert "dashsecret123" not in repr(cfg.to_dict())
    # A secret-named boolean followed by a short option leaves it alone.
    assert redact_argv(["x", "--api-key", "-tp", "2"]) == ("x", "--api-key", "-tp", "2")


def test_version_from_the_engines_answer():
    assert version_from_answer('{"version": "0.5.11", "tp_size": 1}') == "0.5.11"
    assert version_from_answer('{"version": "v0.11.0"}') == "0.11.0"
    assert version_from_answer("not json") is None
    assert version_from_answer('{"version": 5}') is None


def _fake_process(tmp_path: Path, pid: int, *, maps_site: str | None, exe: str) -> str:
    proc = tmp_path / "proc"
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "root").symlink_to(tmp_path / "fs")
    os.symlink(exe, d / "exe")
    if maps_site is not None:
        (d / "maps").write_text(
            "7f00-7f01 r-xp 00000000 08:01 42 "
            f"{maps_site}/torch/lib/libtorch_cuda.so\n7f02-7f03 r--p 0 0:0 0 [heap]\n"
        )
    return str(proc)


def _dist_info(site: Path, name: str, version: str) -> None:
    d = site / f"{name}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")


def test_installed_version_from_the_libraries_the_process_maps(tmp_path):
    site = "/root/venv_sglang211/lib/python3.12/site-packages"
    _dist_info(tmp_path / "fs" / site.lstrip("/"), "sglang", "0.5.11")
    # A venv's python resolves to the base interpreter: exe alone would miss the venv.
    proc = _fake_process(tmp_path, 4100, maps_site=site, exe="/usr/bin/python3.12")
    assert installed_version(proc, 4100, "sglang") == "0.5.11"
    assert installed_version(proc, 4100, "vllm") is None


def test_installed_version_from_argv0_and_exe_prefixes(tmp_path):
    venv = "/opt/vllm-env"
    _dist_info(
        tmp_path / "fs" / venv.lstrip("/") / "lib/python3.11/site-packages", "vllm", "0.11.0"
    )
    proc = _fake_process(tmp_path, 7, maps_site=None, exe="/usr/bin/python3.11")
    assert installed_version(proc, 7, "vllm") is None
    assert installed_version(proc, 7, "vllm", argv=[f"{venv}/bin/python"]) == "0.11.0"
    assert installed_version(proc, 7, "vllm", env={"VIRTUAL_ENV": venv}) == "0.11.0"
    assert installed_version(str(tmp_path / "nowhere"), 7, "vllm") is None


def test_engine_cmdline_with_an_unknown_version_string_is_bad_input():
    from bubblewatch.analysis import engine_from_cmdline

    with pytest.raises(InputError, match="not a version"):
        engine_from_cmdline("python -m sglang.launch_server --pp-size 2", "latest")
    assert engine_from_cmdline("python -m sglang.launch_server", "0.5.11").version == "0.5.11"


def test_discovery_fills_the_version_from_the_engines_site_packages(tmp_path):
    """The launcher's /proc/PID/maps names its site-packages: the version comes from there."""
    from bubblewatch.topology.discover import discover_topology

    site = "/opt/sglang-venv/lib/python3.12/site-packages"
    _dist_info(tmp_path / "fs" / site.lstrip("/"), "sglang", "0.5.11")
    proc = Path(_fake_process(tmp_path, 4000, maps_site=site, exe="/usr/bin/python3.12"))
    argv = ["python", "-m", "sglang.launch_server", "--pp-size", "2", "--port", "30000"]
    (proc / "4000" / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")
    (proc / "4000" / "environ").write_bytes(b"")
    (proc / "4000" / "status").write_text("Name:\tpython\nPPid:\t1\n")
    res = discover_topology({0: [4000], 1: [4000]}, GPUS8[:2], str(proc))
    assert res.engine is not None and res.engine.version == "0.5.11"
    # Unknown locally: the engine's own endpoint is asked.
    res = discover_topology(
        {0: [4000], 1: [4000]},
        GPUS8[:2],
        str(proc),
        version_probe=lambda cfg: "0.5.23" if cfg.port == 30000 else None,
    )
    assert res.engine.version == "0.5.11"  # site-packages first
    (proc / "4000" / "maps").unlink()
    res = discover_topology(
        {0: [4000], 1: [4000]}, GPUS8[:2], str(proc), version_probe=lambda cfg: "0.5.23"
    )
    assert res.engine.version == "0.5.23"


def test_analyze_with_a_ray_command_line_is_bad_input_not_a_traceback(tmp_path, capsys):
    from bubblewatch.cli.main import main
    from bubblewatch.sim import load_scenario, observe, simulate
    from bubblewatch.sources.trace import write_trace

    rec = observe(simulate(load_scenario("pp8-serialized"), 12.0, 0), interval_s=1.0, seed=0)
    path = tmp_path / "t.jsonl"
    write_trace(path, rec)
    rc = main(
        [
            "analyze",
            str(path),
            "--engine-cmdline",
            "vllm serve m --distributed-executor-backend ray -tp 8 -pp 2",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert "Ray places them on the cluster's nodes" in err
    assert "Traceback" not in err


def test_analyze_takes_the_version_a_recording_carries(tmp_path, capsys):
    """`record` writes the discovered engine version in the header; analyze renders for it."""
    import dataclasses
    import json

    from bubblewatch.cli.main import main
    from bubblewatch.sim import load_scenario, observe, simulate
    from bubblewatch.sources.trace import write_trace

    rec = observe(simulate(load_scenario("pp8-serialized"), 30.0, 0), interval_s=1.0, seed=0)
    old = dataclasses.replace(rec, meta={**rec.meta, "engine_version": "0.5.6.post2"})
    path = tmp_path / "old.jsonl"
    write_trace(path, old)
    assert main(["analyze", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    recs = out["recommendations"]
    assert recs and recs[0]["rule"] == "PipelineSerializedUnderLoad"
    assert all("--pp-async-batch-depth" not in (r["command"] or "") for r in recs)
    assert all(r["caveat"] is None for r in recs)  # the version is known
