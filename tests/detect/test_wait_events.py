"""Each collective wait as an event, the job's shape in words, and one story per window.

Pins down issue 19's "three stories for one file": a data-parallel job with a
checkpoint stall every step read `not_pipeline` at the top, `collective_wait`
as its first recommendation, "PP 1 x TP 8" and one "stage 0" row for 8 GPUs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bubblewatch.detect import diagnose
from bubblewatch.detect.jobs import GpuWindow, collective_wait_finding, job_idle_levels, wait_events
from bubblewatch.detect.shape import (
    SHAPE_IN_PHASE,
    SHAPE_INDEPENDENT,
    SHAPE_ONE_GPU,
    SHAPE_PIPELINE,
    gpu_count_note,
    is_pipeline,
    job_shape,
)
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.detect.types import Verdict
from bubblewatch.sim import load_scenario, observe, simulate

from .test_levels_jobs import _levels

OPTS = DetectOptions()


def _stalls(n_steps: int, starts: list[int], length: int) -> tuple[np.ndarray, np.ndarray]:
    """kernel busy and occupancy of 4 GPUs: rank 0 stalls `length` steps from each start."""
    kb = np.ones((4, n_steps))
    occ = np.full((4, n_steps), 0.9)
    for a in starts:
        kb[0, a : a + length] = 0.0
        occ[:, a : a + length] = 0.0
    return kb, occ


def test_every_stall_is_an_event_with_its_start_length_and_energy() -> None:
    kb, occ = _stalls(600, [50, 200, 350, 500], 30)
    power = np.full((4, 600), 400.0)
    power[1:, :] = np.where(occ[1:] == 0.0, 155.0, 400.0)
    w = GpuWindow((0, 1, 2, 3), 0.1, occ, kb, power, start_s=1000.0)
    f = collective_wait_finding(w, _levels(4), OPTS)
    assert f is not None
    assert f.evidence["event_count"] == 4
    events = f.evidence["events"]
    assert [e["offset_s"] for e in events] == [5.0, 20.0, 35.0, 50.0]
    assert [e["start"] for e in events] == [1005.0, 1020.0, 1035.0, 1050.0]
    assert all(e["duration_s"] == 3.0 for e in events)
    # three waiting GPUs, 35 W above the 120 W idle, for 3 s each
    assert all(e["energy_j"] == pytest.approx(3 * 35.0 * 3.0, rel=0.02) for e in events)
    assert sum(e["energy_j"] for e in events) == pytest.approx(f.evidence["energy_j"], rel=1e-6)


def test_many_waits_keep_the_count_and_the_longest_in_time_order() -> None:
    mask = np.zeros(100, dtype=bool)
    for a, n in [(0, 2), (10, 5), (20, 1), (30, 4), (40, 3)]:
        mask[a : a + n] = True
    w = GpuWindow((0, 1), 0.5, np.zeros((2, 100)), None, None, start_s=0.0)
    count, events = wait_events(mask, w, None, 2)
    assert count == 5
    assert [(e.offset_s, e.duration_s) for e in events] == [(5.0, 2.5), (15.0, 2.0)]
    assert all(e.energy_j is None for e in events)
    assert wait_events(np.zeros(10, dtype=bool), w, None, 2) == (0, [])


def test_a_rank_never_seen_idle_takes_the_idle_draw_its_holding_rank_shows() -> None:
    lv = _levels(3)
    assumed = replace(
        lv,
        signal="power",
        idle_power_w=np.array([140.0, 51.0, 200.0]),
        idle_power_source=("no_kernel_samples", "assumed_share", "low_percentile"),
    )
    shared = job_idle_levels(assumed)
    # raised to the measured 140 W; a level above it is kept
    assert shared.idle_power_w.tolist() == [140.0, 140.0, 200.0]
    assert job_idle_levels(lv) is lv  # every level measured: unchanged


@pytest.mark.parametrize(
    ("kw", "kind", "words"),
    [
        (
            {"pipeline_evidence": "topology", "stages": [[0, 1], [2, 3]], "groups": None},
            SHAPE_PIPELINE,
            "pipeline PP 2 x TP 2 (topology given)",
        ),
        (
            {"pipeline_evidence": "none", "stages": [[0, 1, 2, 3]], "groups": [[0, 1, 2, 3]]},
            SHAPE_IN_PHASE,
            "4 GPUs working in phase, no pipeline",
        ),
        (
            {"pipeline_evidence": "none", "stages": [[1, 2], [0]], "groups": [[1, 2], [0]]},
            SHAPE_INDEPENDENT,
            "2 independent GPU groups (1,2 | 0)",
        ),
        (
            {"pipeline_evidence": "none", "stages": [[3]], "groups": [[3]], "idle_gpus": [0]},
            SHAPE_ONE_GPU,
            "one GPU works (GPU 3); GPU(s) 0 idle",
        ),
        (
            {
                "pipeline_evidence": "none",
                "stages": [[1, 2], [0]],
                "groups": [[1, 2], [0]],
                "waiting_together": [0, 1, 2],
            },
            SHAPE_IN_PHASE,
            "3 GPUs in one job, tied by collectives",
        ),
    ],
)
def test_the_job_is_named_by_its_shape_never_pp_1(kw, kind, words) -> None:
    args = {"idle_gpus": (), "waiting_together": (), "topology_given": False, **kw}
    got_kind, text = job_shape(**args)
    assert got_kind == kind and words in text
    assert "PP 1" not in text
    assert is_pipeline({"job_shape": got_kind}) is (kind == SHAPE_PIPELINE)


def test_an_inferred_gpu_count_is_said() -> None:
    note = gpu_count_note({"gpus_from": "sampling structure (no index column)"}, 8)
    assert note is not None and "8 GPUs, counted from the sampling structure" in note
    assert "--gpus" in note
    assert gpu_count_note({}, 8) is None


@pytest.fixture(scope="module")
def checkpoint_stall():
    rec = observe(simulate(load_scenario("dp8-checkpoint-stall"), duration_s=60, seed=0), 1.0)
    return rec, diagnose(rec)


def test_a_checkpoint_stall_every_step_is_one_story(checkpoint_stall) -> None:
    _, d = checkpoint_stall
    # the job-level problem leads; the job's shape follows it
    assert [f.verdict for f in d.findings][:2] == [Verdict.COLLECTIVE_WAIT, Verdict.NOT_PIPELINE]
    ev = d.evidence
    assert ev["job_shape"] == SHAPE_IN_PHASE and "8 GPUs in one job" in str(ev["job"])
    cw = d.findings[0].evidence
    assert cw["event_count"] == ev["collective_wait_event_count"]
    assert isinstance(cw["event_count"], int) and cw["event_count"] >= 10
    assert len(cw["events"]) == min(cw["event_count"], OPTS.cw_max_events)
