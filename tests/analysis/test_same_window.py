"""One window, every way in: analyze, diagnose, compare, fleet's analysis and the daemon agree.

Each command once assembled topology, engine, schedule, diagnosis and rules
itself; `diagnose --simulate pp4-1f1b-loader` was `healthy` where `analyze`
of the same run was `below_schedule`, and compare and fleet judged training
without its schedule. The window is what `diagnose --simulate` sees, written
as a trace for the others. Fleet reads Prometheus (its grid resamples the
series), so its part here is the analysis it runs on the joined recording:
the module called with the engine and the recording's schedule, as fleet does.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from recording_rows import load_samples

from bubblewatch.analysis import Target, analyse_window, resolve_schedule, target_for
from bubblewatch.cli.diagnose import _simulated
from bubblewatch.cli.main import main
from bubblewatch.daemon.loop.windows import analyze_pipelines
from bubblewatch.daemon.pipelines.discovery import sim_pipelines
from bubblewatch.daemon.pipelines.tracker import PipelineTracker
from bubblewatch.daemon.ring import RingBuffer
from bubblewatch.model.recording import Recording
from bubblewatch.rules import RuleEngine, load_rules
from bubblewatch.sources.trace import read_trace, write_trace

DURATION_S = 30.0
# scenario, the verdict its window must get (so the test cannot pass on an empty answer)
CASES = {"pp8-serialized": "serialized", "pp4-1f1b-loader": "below_schedule"}

Story = tuple[str, float, float | None, str | None]  # verdict, confidence, bubble, first rule


def _story(verdict: str, confidence: float, bubble: Any, recs: list[dict[str, Any]]) -> Story:
    fired = [r for r in recs if r.get("severity") != "info"] or recs
    first = f"{fired[0]['rule']}: {fired[0]['summary']}" if fired else None
    ratio = None if bubble is None else round(float(bubble), 3)
    return verdict, round(float(confidence), 3), ratio, first


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _from_report(d: dict[str, Any]) -> Story:
    ev, recs = d["evidence"], d["recommendations"]
    return _story(d["verdict"], d["confidence"], ev["bubble_ratio"], recs)


def _daemon(rec: Recording) -> Story:
    """The daemon's window analysis of a ring holding the recording (rules held an hour)."""
    topo = rec.topology
    assert topo is not None
    lookup = sim_pipelines([topo], topo.argv, instance="test")
    tracker = PipelineTracker()
    tracker.update(lookup, 0.0, initial=True)
    ring = RingBuffer(rec.n_samples + 1)
    ring.set_gpus(rec.gpus)
    ring.add(rec.samples())
    for row in load_samples(rec):
        ring.add_load(row)
    rules = RuleEngine(load_rules())
    end = rec.end_s
    window_s = rec.end_s - rec.start_s + 1.0

    def round_at(now: float) -> Any:
        (res,) = analyze_pipelines(
            ring, tracker, None, rules, now, end=end, window_s=window_s, gpus=rec.gpus
        )
        return res

    round_at(end)  # a rule's `for` starts counting here ...
    res = round_at(end + 3600.0)  # ... and has held an hour by now
    d = res.diagnosis
    recs = [r.to_dict() for r in res.recommendations]
    return _story(d.verdict.value, d.confidence, d.evidence.get("bubble_ratio"), recs)


@pytest.fixture(scope="module", params=sorted(CASES))
def window(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    name = request.param
    rec = _simulated(name, DURATION_S, None)
    path = tmp_path_factory.mktemp("same") / f"{name}.jsonl"
    write_trace(path, rec)
    return name, str(path)


def test_every_command_and_the_daemon_tell_one_story(window, capsys) -> None:  # type: ignore[no-untyped-def]
    name, path = window
    stories: dict[str, Story] = {}
    stories["diagnose --simulate"] = _from_report(
        _cli(capsys, "diagnose", "--simulate", name, "--duration", str(DURATION_S))
    )
    stories["analyze"] = _from_report(_cli(capsys, "analyze", path))
    cmp = _cli(capsys, "compare", path, path)
    for side in ("before", "after"):
        s = cmp[side]
        recs = cmp["recommendations_before"] if side == "before" else []
        stories[f"compare {side}"] = _story(s["verdict"], s["confidence"], s["bubble_ratio"], recs)

    rec = read_trace(path)
    engine = target_for(rec.meta, rec.topology).engine
    fleet = analyse_window(rec, Target(rec.topology, engine, resolve_schedule(engine, rec.meta)))
    d = fleet.diagnosis
    stories["fleet's analysis"] = _story(
        d.verdict.value,
        d.confidence,
        d.evidence.get("bubble_ratio"),
        [r.to_dict() for r in fleet.recommendations],
    )
    stories["daemon"] = _daemon(rec)

    want = stories["analyze"]
    assert want[0] == CASES[name], stories
    assert want[2] is not None and math.isfinite(want[2]), stories
    assert want[3] is not None, stories  # a recommendation fired
    # compare's AFTER side carries no recommendations of its own: its diagnosis only
    assert stories.pop("compare after")[:3] == want[:3], stories
    for how, story in stories.items():
        assert story == want, f"{how}: {story} != analyze: {want}"
