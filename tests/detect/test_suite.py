"""The simulated scenario suite: every case gets the verdict its physics implies.

Also the issue's targets: never `serialized` on an idle, TP, DP or healthy case.
"""

from __future__ import annotations

import pytest

from bubblewatch.detect import Verdict

from .scenario_suite import CASES, Case, diagnose_case, run_case

pytestmark = pytest.mark.slow

NEVER_SERIALIZED = {"idle", "not_pipeline", "healthy"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("suite"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case, workdir: str):
    d = diagnose_case(case, run_case(case, workdir))
    ok, what = case.check(d)
    assert ok, (case.why, what, d.evidence)
    if case.expected in NEVER_SERIALIZED:
        assert not d.has(Verdict.SERIALIZED)
    assert 0.0 < d.confidence <= 1.0


def test_suite_covers_the_issue():
    verdicts = {c.expected for c in CASES}
    assert verdicts == {v.value for v in Verdict}
    assert len(CASES) >= 30
    assert sum(c.via != "trace" for c in CASES) >= 5
    assert {c.interval_s for c in CASES} >= {0.1, 2.0}
    scenarios = {c.scenario for c in CASES}
    assert {"pp2-async", "pp8-serialized", "pp16-serialized", "pp4x2"} <= scenarios
    training = {"dp8-training", "dp8-checkpoint-stall", "fsdp8-offload", "idle-loaded"}
    assert training | {"pp2x8-gpipe", "pp4-1f1b", "pp4-gpipe-m1"} <= scenarios
