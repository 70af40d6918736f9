"""The fill fix speaks each SGLang release's own names (issue 18): flag, live key, flags kept.

Over the generated flag tables: every command the fill and limit rules render
for these releases is one that release's parser accepts, with its own
spelling of the per-slot cap and of its live key.
"""

from __future__ import annotations

import pytest

from bubblewatch.engines.flagtable import live_key, release_spelling, table_for
from bubblewatch.rules import load_rules
from bubblewatch.rules.derived_facts import derive
from bubblewatch.rules.engine_facts import engine_facts
from bubblewatch.rules.evaluate import evaluate
from bubblewatch.rules.facts import facts_from_mapping
from bubblewatch.topology.cmdline import parse_engine_cmdline

VERSIONS = [
    "0.4.10.post2",
    "0.5.2",
    "0.5.3",
    "0.5.3.post1",
    "0.5.7",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.23",
]
OLD = {"0.4.10.post2", "0.5.2", "0.5.3"}


@pytest.mark.parametrize("version", VERSIONS)
def test_cap_spelling_per_release(version: str) -> None:
    table = table_for("sglang", version)
    assert table is not None
    flag = release_spelling(table, "--pp-max-micro-batch-size")
    key = live_key(table, "pp_max_micro_batch_size")
    if version in OLD:
        assert (flag, key) == ("--max-micro-batch-size", "max_micro_batch_size")
    else:
        assert (flag, key) == ("--pp-max-micro-batch-size", "pp_max_micro_batch_size")
    assert table.accepts(flag)


def test_release_without_the_cap_has_no_spelling() -> None:
    assert release_spelling(table_for("sglang", "0.4.6.post1"), "--pp-max-micro-batch-size") is None
    assert release_spelling(None, "--pp-max-micro-batch-size") == "--pp-max-micro-batch-size"


def _serialized(cmd: str, version: str, *, queued: float, micro: float):  # type: ignore[no-untyped-def]
    """The engine and the recommendations for a serialized PP8 window with 8 running."""
    engine = parse_engine_cmdline(cmd.split(), {}, version=version)
    assert engine is not None
    given = {
        "diagnosis": {
            "verdict": "serialized",
            "verdicts": ["serialized"],
            "load_limited": False,
            "window_s": 300.0,
        },
        "evidence": {"concurrency": 1.0, "bubble_ratio": 0.875, "micro_batch_requests": micro},
        "load": {"known": True, "running": 8.0, "queued": queued},
        "engine": engine_facts(engine),
    }
    facts = facts_from_mapping(given, partial=True, argv=engine.argv)
    facts = facts_from_mapping(
        {**given, "derived": derive(dict(facts.data))}, partial=True, argv=engine.argv
    )
    return engine, {r.rule: r for r in evaluate(load_rules(), facts)}


GRAPHS_OFF = {
    # --cuda-graph-backend-decode exists from 0.5.14: before, graphs are off by the old flag.
    True: "--cuda-graph-backend-decode disabled",
    False: "--disable-cuda-graph",
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("queued", [0.0, 56.0])
def test_every_rendered_command_is_valid_for_its_release(version: str, queued: float) -> None:
    new = version in {"0.5.14", "0.5.15", "0.5.23"}
    cap = "--pp-max-micro-batch-size" if version not in OLD else "--max-micro-batch-size"
    cmd = f"python -m sglang.launch_server --pp-size 8 --port 30000 {GRAPHS_OFF[new]}"
    if queued:
        cmd += f" {cap} 1"
    _, recs_by = _serialized(cmd, version, queued=queued, micro=1.0 if queued else 8.0)
    recs = list(recs_by.values())
    fill = [r for r in recs if r.rule in ("PipelineSerializedUnderLoad", "MicroBatchCapLimitsLoad")]
    assert fill, [r.rule for r in recs]
    for rec in recs:
        if rec.rendered is None:
            continue
        assert rec.rendered.valid, (rec.rule, rec.rendered.problems)
        assert "--cuda-graph-backend-decode" not in rec.rendered.command or new
        if rec in fill:
            assert f"{cap} " in rec.rendered.command
            other = "--pp-max-micro-batch-size" if cap != "--pp-max-micro-batch-size" else None
            assert other is None or other not in rec.rendered.command
            key = cap[2:].replace("-", "_")
            assert rec.rendered.live is not None and f'"{key}"' in rec.rendered.live


def test_a_kept_flag_the_release_lacks_makes_the_command_invalid() -> None:
    """0.5.13.post1 has no --cuda-graph-backend-decode: a fix that keeps it is not valid."""
    cmd = (
        "python -m sglang.launch_server --pp-size 8 --port 30000"
        " --cuda-graph-backend-decode disabled"
    )
    _, recs = _serialized(cmd, "0.5.13.post1", queued=0.0, micro=8.0)
    cap = recs["PipelineSerializedUnderLoad"].rendered
    assert cap is not None and not cap.valid
    assert any("has no flag --cuda-graph-backend-decode" in p for p in cap.problems)
    graphs = recs["CudaGraphsOffSerializedSGLang"].rendered
    assert graphs is not None and graphs.valid
    assert "--cuda-graph-backend-decode" not in graphs.command
