"""build_facts from a diagnosis; render_fix on command lines."""

from __future__ import annotations

import math

import pytest

from bubblewatch.detect.types import Diagnosis, EvidenceValue, Finding, StageStats, Verdict
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology
from bubblewatch.rules import FactsError, Fix, build_facts, facts_from_mapping, render_fix
from bubblewatch.topology.engine_config import EngineConfig


def _stage(s: int, occ: float) -> StageStats:
    return StageStats(s, (s,), occ, None, None, 150.0, 80.0, None, math.nan, None)


def _diag(occ: list[float], **ev: EvidenceValue) -> Diagnosis:
    return Diagnosis(
        Verdict.IMBALANCED,
        0.7,
        (Finding(Verdict.IMBALANCED, 0.7, "x", stage=1),),
        tuple(_stage(i, o) for i, o in enumerate(occ)),
        60.0,
        600,
        None,
        dict(ev),
    )


def test_build_facts_shapes_and_derived_values() -> None:
    engine = EngineConfig(
        name="sglang", pp_size=2, max_running_requests=9, layer_partition=(30, 30)
    )
    topo = Topology.from_sizes(2, 1, interconnect="PCIe")
    gpus = [
        GpuInfo(0, name="RTX PRO 6000", power_limit_w=600.0),
        GpuInfo(1, name="RTX PRO 6000", power_limit_w=550.0),
    ]
    f = build_facts(
        _diag([0.25, 0.75], concurrency=1.0, running_requests=6, pp_size="bad"),
        engine,
        topo,
        gpus=gpus,
    )
    assert f.get("engine.micro_batch_size") == 4  # max(9 // 2, 1)
    assert f.get("engine.num_layers") == 60
    assert f.get("hardware.interconnect") == "pcie"
    assert f.get("hardware.power_limit_w") == 550.0
    assert f.get("gpus")[1]["stage"] == 1
    assert f.get("stages")[0]["lag_s"] is None  # NaN -> null
    assert f.get("evidence.pp_size") is None  # wrong type from the detector -> null
    assert f.get("evidence.running_requests") == 6.0 and f.get("load.known") is True
    assert f.get("diagnosis.confidences") == {"imbalanced": 0.7}
    # stage 1 takes 3x as long per layer: 60 layers split 3:1 -> 45,15
    assert f.get("derived.layer_partition_suggested") == "45,15"
    assert f.get("derived.stage_time_shares") == "25%,75%"
    assert f.get("derived.fill_gain_ratio") == pytest.approx(2.0)  # min(2, 6) / 1.0


def test_unknown_engine_and_topology() -> None:
    f = build_facts(_diag([0.5, 0.5]), None, None)
    assert f.get("engine.known") is False and f.get("engine.pp_size") is None
    assert f.get("topology.known") is False and f.argv == ()
    assert f.get("derived.layer_partition_suggested") is None


def test_partial_facts_errors_name_the_path() -> None:
    with pytest.raises(FactsError, match=r"facts.engine.pp_size: expected int, got 'eight'"):
        facts_from_mapping({"engine": {"pp_size": "eight"}}, partial=True)
    with pytest.raises(FactsError, match="unknown field 'ppsize'"):
        facts_from_mapping({"engine": {"ppsize": 8}}, partial=True)


def test_render_changes_in_place_and_keeps_secrets_redacted() -> None:
    argv = [
        "vllm",
        "serve",
        "m",
        "--enforce-eager",
        "--api-key=sk-abcdefghijkl",
        "-pp",
        "4",
        "--x",
        "1",
    ]
    fix = Fix("vllm", (("--tensor-parallel-size", "4"), ("--x", "2")), ("--enforce-eager", "-pp"))
    r = render_fix(argv, fix)
    assert r.argv == (
        "vllm",
        "serve",
        "m",
        "--api-key=<redacted>",
        "--x",
        "2",
        "--tensor-parallel-size",
        "4",
    )
    assert r.removed == ("--enforce-eager", "-pp 4", "--x 1")
    assert "sk-abcdefghijkl" not in r.command + r.diff
    assert r.diff.splitlines()[2:] == [
        "- --enforce-eager",
        "- -pp 4",
        "- --x 1",
        "+ --x 2",
        "+ --tensor-parallel-size 4",
    ]


def test_render_env_and_bare_flags() -> None:
    r = render_fix(
        ["python", "-m", "sglang.launch_server", "--disable-cuda-graph", "m"],
        Fix(
            "sglang",
            (("--enable-metrics", None),),
            ("--disable-cuda-graph",),
            (("SGLANG_PP_LAYER_PARTITION", "1,2"),),
        ),
    )
    assert (
        r.command
        == "SGLANG_PP_LAYER_PARTITION=1,2 python -m sglang.launch_server m --enable-metrics"
    )


def test_render_env_replaces_the_commands_own_assignment() -> None:
    """The shell keeps the last of two assignments: a fix put in front of the user's own
    `VLLM_PP_LAYER_PARTITION=2,2` would do nothing, so the user's goes."""
    argv = ["env", "VLLM_PP_LAYER_PARTITION=2,2", "OMP_NUM_THREADS=1", "vllm", "serve", "m"]
    r = render_fix(argv, Fix("vllm", set_env=(("VLLM_PP_LAYER_PARTITION", "3,1"),)))
    assert r.command == "VLLM_PP_LAYER_PARTITION=3,1 env OMP_NUM_THREADS=1 vllm serve m"
    assert r.removed == ("VLLM_PP_LAYER_PARTITION=2,2",)
    assert r.diff.splitlines()[2:] == [
        "- VLLM_PP_LAYER_PARTITION=2,2",
        "+ VLLM_PP_LAYER_PARTITION=3,1",
    ]
    # An argument that only looks like one, after the program, is the program's.
    kept = render_fix(["vllm", "serve", "X=1"], Fix("vllm", set_env=(("X", "2"),)))
    assert kept.command == "X=2 vllm serve X=1"
