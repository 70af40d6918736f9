"""Issue 5 done-when: the seed gets the async-depth and CUDA-graph fixes; pp8-async does not."""

from __future__ import annotations

import shlex

import pytest

from bubblewatch.detect.types import Diagnosis, EvidenceValue, Finding, StageStats, Verdict
from bubblewatch.model.topology import Topology
from bubblewatch.rules import RuleSet, combined_fix, format_recommendations, load_rules, recommend
from bubblewatch.topology.engine import EngineConfig
from bubblewatch.topology.redact import redact_argv

SEED_CMD = (
    "python -m sglang.launch_server --model-path moonshotai/Kimi-K2.6 --pp-size 8 "
    "--disable-cuda-graph --port 30000 --api-key sk-secret"
)


def _stages(occ: float, n: int = 8) -> tuple[StageStats, ...]:
    return tuple(
        StageStats(
            stage=s,
            gpus=(s,),
            occupancy_ratio=occ,
            sm_active_ratio=occ * 0.5,
            kernel_busy_ratio=0.9,
            power_w=170.0,
            idle_power_w=85.0,
            spin_ratio=0.0,
            lag_s=0.01 * s,
            bubble_energy_j=100.0,
        )
        for s in range(n)
    )


def _evidence(**kw: EvidenceValue) -> dict[str, EvidenceValue]:
    ev: dict[str, EvidenceValue] = {
        "signal": "sm_active",
        "pp_size": 8,
        "tp_size": 1,
        "concurrency": 1.0,
        "bubble_ratio": 0.875,
        "mean_occupancy_ratio": 0.125,
        "lag_rank_correlation": 0.95,
        "spin_ratio": 0.0,
        "launch_bound_index": 0.8,
        "imbalance_ratio": 1.05,
        "imbalanced_stage": None,
        "straggler_gpu": None,
        "throttle_reasons": [],
        "bubble_energy_j": 5400.0,
        "topology_agreement": True,
        "running_requests": 8.0,
        "queued_requests": 4.0,
    }
    ev.update(kw)
    return ev


def _engine(argv: list[str], **kw: object) -> EngineConfig:
    return EngineConfig(name="sglang", pp_size=8, argv=redact_argv(argv), **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def test_seed_serialized_recommends_depth_and_cuda_graphs(rules: RuleSet) -> None:
    diag = Diagnosis(
        verdict=Verdict.SERIALIZED,
        confidence=0.9,
        findings=(
            Finding(Verdict.SERIALIZED, 0.9, "one stage at a time"),
            Finding(Verdict.LAUNCH_BOUND, 0.8, "kernel-busy high, SMs idle"),
        ),
        stages=_stages(0.125),
        window_s=300.0,
        n_samples=3000,
        load_limited=False,
        evidence=_evidence(),
    )
    engine = _engine(
        shlex.split(SEED_CMD),
        pp_async_batch_depth=0,
        cuda_graph=False,
        flags={"--pp-size": "8", "--disable-cuda-graph": True, "--port": "30000"},
    )
    recs = recommend(diag, engine, Topology.from_sizes(8, 1), rules=rules)
    by_rule = {r.rule: r for r in recs}
    assert {"PipelineSerializedUnderLoad", "CudaGraphsDisabledSGLang"} <= set(by_rule)
    depth = by_rule["PipelineSerializedUnderLoad"]
    assert depth.fix is not None and dict(depth.fix.add_flags) == {"--pp-async-batch-depth": "8"}
    assert depth.command is not None
    cmd = shlex.split(depth.command)
    assert cmd[cmd.index("--pp-async-batch-depth") + 1] == "8"
    assert cmd[cmd.index("--api-key") + 1] == "<redacted>"
    assert "sk-secret" not in depth.command and "sk-secret" not in (depth.diff or "")
    assert "+ --pp-async-batch-depth 8" in (depth.diff or "")
    # pipeline fill bound: min(pp 8, running 8) / concurrency 1.0
    assert depth.expected_gain is not None and depth.expected_gain.factor == pytest.approx(8.0)
    graphs = by_rule["CudaGraphsDisabledSGLang"]
    assert graphs.fix is not None and graphs.fix.remove_flags == ("--disable-cuda-graph",)
    assert graphs.command is not None and "--disable-cuda-graph" not in shlex.split(graphs.command)
    assert "- --disable-cuda-graph" in (graphs.diff or "")
    both = combined_fix(recs)
    assert both is not None
    cmd_all = shlex.split(both.command)
    assert "--disable-cuda-graph" not in cmd_all
    assert cmd_all[cmd_all.index("--pp-async-batch-depth") + 1] == "8"
    assert cmd_all[cmd_all.index("--api-key") + 1] == "<redacted>"
    text = format_recommendations(recs, color=False)
    assert both.command in text
    assert "--pp-async-batch-depth 8" in text and "sk-secret" not in text
    assert [r.severity.rank for r in recs] == sorted((r.severity.rank for r in recs), reverse=True)


def test_pp8_async_healthy_recommends_none_of_that(rules: RuleSet) -> None:
    argv = shlex.split(SEED_CMD.replace("--disable-cuda-graph", "--pp-async-batch-depth 8"))
    diag = Diagnosis(
        verdict=Verdict.HEALTHY,
        confidence=0.85,
        findings=(Finding(Verdict.HEALTHY, 0.85, "stages busy together"),),
        stages=_stages(0.8),
        window_s=300.0,
        n_samples=3000,
        load_limited=None,
        evidence=_evidence(
            concurrency=6.4,
            bubble_ratio=0.2,
            launch_bound_index=0.1,
            mean_occupancy_ratio=0.8,
            running_requests=64.0,
        ),
    )
    engine = _engine(
        argv,
        pp_async_batch_depth=8,
        cuda_graph=True,
        flags={"--pp-size": "8", "--pp-async-batch-depth": "8"},
    )
    recs = recommend(diag, engine, Topology.from_sizes(8, 1), rules=rules)
    fired = {r.rule for r in recs}
    assert not fired & {
        "PipelineSerializedUnderLoad",
        "PipelineSerializedUnderLoadCautious",
        "CudaGraphsDisabledSGLang",
        "MicroBatchStarvation",
    }
    assert all(r.fix is None or "--pp-async-batch-depth" not in dict(r.fix.add_flags) for r in recs)
