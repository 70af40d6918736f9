"""The seed gets the knob that fills the pipeline (the per-slot cap), for its version.

Issue 12 done-when: the first recommendation is the per-slot cap with the simulator's
gain, the command line is valid for the SGLang version given, and below 0.5.7 no
depth flag is rendered at all.
"""

from __future__ import annotations

import shlex

import pytest

from bubblewatch.detect.types import Diagnosis, EvidenceValue, Finding, StageStats, Verdict
from bubblewatch.model.topology import Topology
from bubblewatch.rules import RuleSet, combined_fix, format_recommendations, load_rules, recommend
from bubblewatch.topology.engine_config import EngineConfig
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
        "queued_requests": 0.0,  # the seed: 8 requests, all running
    }
    ev.update(kw)
    return ev


def _engine(argv: list[str], **kw: object) -> EngineConfig:
    return EngineConfig(name="sglang", pp_size=8, argv=redact_argv(argv), port=30000, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def _seed_diagnosis() -> Diagnosis:
    return Diagnosis(
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


def _seed_engine(version: str | None) -> EngineConfig:
    return _engine(
        shlex.split(SEED_CMD),
        pp_async_batch_depth=0,
        cuda_graph=False,
        graphs_off_by=("--disable-cuda-graph",),
        version=version,
        flags={"--pp-size": "8", "--disable-cuda-graph": True, "--port": "30000"},
    )


def test_seed_serialized_recommends_the_per_slot_cap_first(rules: RuleSet) -> None:
    recs = recommend(
        _seed_diagnosis(), _seed_engine("0.5.11"), Topology.from_sizes(8, 1), rules=rules
    )
    by_rule = {r.rule: r for r in recs}
    first = recs[0]
    assert first.rule == "PipelineSerializedUnderLoad"
    assert first.fix is not None and dict(first.fix.add_flags) == {"--pp-max-micro-batch-size": "1"}
    assert first.rendered is not None and first.rendered.valid and first.rendered.caveat is None
    cmd = shlex.split(first.rendered.command)
    assert cmd[cmd.index("--pp-max-micro-batch-size") + 1] == "1"
    assert cmd[cmd.index("--api-key") + 1] == "<redacted>"
    # The running server takes the cap live; the key is a placeholder, never the secret.
    live = first.rendered.live
    assert live is not None and "http://127.0.0.1:30000/set_internal_state" in live
    assert '"pp_max_micro_batch_size": 1' in live and "$SGLANG_API_KEY" in live
    # The simulator's gain on the seed case (graphs off), and the evidence that triggered it.
    assert first.expected_gain is not None and first.expected_gain.factor == pytest.approx(1.71)
    assert "about 8 per micro-batch in flight" in first.summary
    graphs = by_rule["CudaGraphsDisabledSGLang"]
    assert graphs.command is not None and "--disable-cuda-graph" not in shlex.split(graphs.command)
    assert "- --disable-cuda-graph" in (graphs.diff or "")
    both = combined_fix(recs)
    assert both is not None and both.valid
    cmd_all = shlex.split(both.command)
    assert "--disable-cuda-graph" not in cmd_all
    assert cmd_all[cmd_all.index("--pp-max-micro-batch-size") + 1] == "1"
    # Depth waits for CUDA graphs (with them off it costs tokens/s at high load).
    assert "--pp-async-batch-depth" not in cmd_all
    text = format_recommendations(recs, color=False)
    assert both.command in text and "sk-secret" not in text
    assert "--pp-async-batch-depth 8" not in text
    assert [r.severity.rank for r in recs] == sorted((r.severity.rank for r in recs), reverse=True)


@pytest.mark.parametrize("version", ["0.5.3.post1", "0.5.6", "0.5.6.post2"])
def test_before_0_5_7_no_depth_flag_is_ever_rendered(rules: RuleSet, version: str) -> None:
    recs = recommend(
        _seed_diagnosis(), _seed_engine(version), Topology.from_sizes(8, 1), rules=rules
    )
    assert recs[0].rule == "PipelineSerializedUnderLoad"
    text = format_recommendations(recs, color=False)
    assert "--pp-async-batch-depth" not in text
    assert "--pp-max-micro-batch-size 1" in text
    for r in recs:
        assert r.rendered is None or r.rendered.valid, (r.rule, r.rendered.problems)


def test_an_unknown_version_is_said(rules: RuleSet) -> None:
    recs = recommend(_seed_diagnosis(), _seed_engine(None), Topology.from_sizes(8, 1), rules=rules)
    first = recs[0]
    assert first.rendered is not None and first.rendered.caveat is not None
    assert "version unknown" in first.rendered.caveat
    assert "exists from sglang 0.5.3.post1" in first.rendered.caveat
    assert first.rendered.live is None  # whether the server takes it live is unknown
    assert "version unknown" in format_recommendations(recs, color=False)


def test_a_healthy_pipeline_gets_no_fill_fix_but_depth_above_one_is_flagged(rules: RuleSet) -> None:
    argv = shlex.split(
        SEED_CMD.replace(
            "--disable-cuda-graph", "--pp-async-batch-depth 8 --pp-max-micro-batch-size 8"
        )
    )
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
        pp_max_micro_batch_size=8,
        cuda_graph=True,
        version="0.5.11",
        flags={"--pp-size": "8", "--pp-async-batch-depth": "8"},
    )
    recs = recommend(diag, engine, Topology.from_sizes(8, 1), rules=rules)
    fired = {r.rule for r in recs}
    assert not fired & {
        "PipelineSerializedUnderLoad",
        "AsyncBatchDepthSlack",
        "CudaGraphsDisabledSGLang",
        "MicroBatchStarvation",
    }
    # SGLang issue 15527: depth above 1 gives wrong output; 1 is as fast in the simulator.
    (risky,) = [r for r in recs if r.rule == "AsyncDepthAboveOne"]
    assert risky.command is not None
    cmd = shlex.split(risky.command)
    assert cmd[cmd.index("--pp-async-batch-depth") + 1] == "1"
