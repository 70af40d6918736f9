"""No rule lowers a limit the engine is hitting (issue 18), over a grid of loads and limits.

MicroBatchStarvation used to render `pp_size x 8` whatever ran: 64 for an
engine at 128 running with 40 queued.
"""

from __future__ import annotations

import functools
import itertools

import pytest

from bubblewatch.rules import load_rules
from bubblewatch.rules.derived_facts import derive
from bubblewatch.rules.engine_facts import engine_facts
from bubblewatch.rules.evaluate import evaluate
from bubblewatch.rules.facts import facts_from_mapping
from bubblewatch.topology.cmdline import parse_engine_cmdline

LIMIT_FLAGS = {
    "MicroBatchStarvation": "--max-running-requests",
    "MaxNumSeqsLimitsLoad": "--max-num-seqs",
    "MicroBatchCapLimitsLoad": "--pp-max-micro-batch-size",
    "PipelineSerializedUnderLoad": "--pp-max-micro-batch-size",
}


@functools.cache
def _rules():  # type: ignore[no-untyped-def]
    return load_rules()


def _recs(cmd: str, version: str, load: dict[str, float], micro: float):  # type: ignore[no-untyped-def]
    engine = parse_engine_cmdline(cmd.split(), {}, version=version)
    assert engine is not None
    given = {
        "diagnosis": {"verdict": "healthy", "verdicts": ["healthy"], "window_s": 300.0},
        "evidence": {"micro_batch_requests": micro, "concurrency": 4.0, "bubble_ratio": 0.5},
        "load": {"known": True, **load},
        "engine": engine_facts(engine),
    }
    facts = facts_from_mapping(given, partial=True, argv=engine.argv)
    facts = facts_from_mapping(
        {**given, "derived": derive(dict(facts.data))}, partial=True, argv=engine.argv
    )
    return engine, evaluate(_rules(), facts)


def _value(command: str, flag: str) -> int:
    toks = command.split()
    return int(toks[len(toks) - 1 - toks[::-1].index(flag) + 1])


@pytest.mark.parametrize(
    ("running", "queued", "limit", "peak"),
    list(itertools.product([8.0, 128.0, 500.0], [0.0, 40.0], [16, 128], [0.0, 300.0])),
)
def test_a_rendered_limit_is_above_the_one_that_binds(
    running: float, queued: float, limit: int, peak: float
) -> None:
    load = {"running": running, "queued": queued, "peak": peak or None}
    cases = [
        (f"python -m sglang.launch_server --pp-size 8 --max-running-requests {limit}", "0.5.11"),
        (
            f"python -m sglang.launch_server --pp-size 8 --pp-max-micro-batch-size {limit // 8}",
            "0.5.11",
        ),
        (f"vllm serve m --pipeline-parallel-size 2 --max-num-seqs {limit}", "0.15.1"),
    ]
    for cmd, version in cases:
        engine, recs = _recs(cmd, version, load, micro=float(limit // 8))
        current = {
            "--max-running-requests": engine.max_running_requests,
            "--max-num-seqs": engine.max_running_requests,
            "--pp-max-micro-batch-size": engine.pp_max_micro_batch_size,
        }
        for rec in recs:
            flag = LIMIT_FLAGS.get(rec.rule)
            if flag is None or rec.rendered is None or current[flag] is None:
                continue
            new = _value(rec.rendered.command, flag)
            assert new > current[flag], (rec.rule, cmd, load, new)
            if rec.rule != "PipelineSerializedUnderLoad":
                # Sized for the load: at least what runs and waits now.
                slots = engine.pp_size if flag == "--pp-max-micro-batch-size" else 1
                assert new * slots >= min(running + queued, 10_000) - 1e-9, (rec.rule, new)


def test_the_grid_exercises_every_limit_rule() -> None:
    fired = set()
    for cmd, version in [
        ("python -m sglang.launch_server --pp-size 8 --max-running-requests 64", "0.5.11"),
        ("python -m sglang.launch_server --pp-size 8 --pp-max-micro-batch-size 2", "0.5.11"),
        ("vllm serve m --pipeline-parallel-size 2 --max-num-seqs 64", "0.15.1"),
    ]:
        _, recs = _recs(cmd, version, {"running": 64.0, "queued": 40.0}, micro=2.0)
        fired |= {r.rule for r in recs}
    assert {"MicroBatchStarvation", "MicroBatchCapLimitsLoad", "MaxNumSeqsLimitsLoad"} <= fired


@pytest.mark.parametrize(
    ("version", "flags", "env", "batches", "asynchronous"),
    [
        ("0.12.0", "", {}, 8, False),
        ("0.19.1", "", {}, 8, True),
        ("0.23.0", "", {}, 8, True),  # the V2 runner is chosen by architecture: not assumed
        ("0.23.0", "", {"VLLM_USE_V2_MODEL_RUNNER": "1"}, 9, True),
        ("0.33.0", "", {}, 9, True),
        ("0.33.0", "--no-async-scheduling", {}, 8, False),
        ("0.33.0", "", {"VLLM_USE_V2_MODEL_RUNNER": "0"}, 8, False),
    ],
)
def test_vllm_batches_in_flight_fact_follows_the_release(
    version: str, flags: str, env: dict[str, str], batches: int, asynchronous: bool
) -> None:
    """Issue 18: vLLM's batch queue per release and flags, as the rules see it."""
    cmd = f"vllm serve m --pipeline-parallel-size 8 {flags}".split()
    engine = parse_engine_cmdline(cmd, env, version=version)
    assert engine is not None
    facts = engine_facts(engine)
    assert facts["batches_in_flight"] == batches
    assert facts["async_scheduling"] is asynchronous
    unknown = parse_engine_cmdline(cmd, env)
    assert unknown is not None and engine_facts(unknown)["batches_in_flight"] is None
