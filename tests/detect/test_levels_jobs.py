"""Levels learned per GPU model and job; the job findings (collective wait, underfed); the physics
of serialized pipelines with uncertainty, schedules, and launch-bound from power alone."""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.detect import Verdict, diagnose
from bubblewatch.detect.grid import resample
from bubblewatch.detect.jobs import GpuWindow, collective_wait_finding, underfed_finding
from bubblewatch.detect.levels import LEVEL_LEARNED, LEVEL_MODEL, LEVEL_PLATEAU, learn_levels
from bubblewatch.detect.thresholds import DetectOptions
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import recording_from_arrays
from bubblewatch.model.schedule import PipelineSchedule
from bubblewatch.model.topology import Topology

OPTS = DetectOptions()
H100 = "NVIDIA H100 80GB HBM3"
T0 = 1_775_000_000.0


def _rec(t_n: int, values: dict[Metric, np.ndarray], name: str = H100, limit: float | None = None):
    n = next(iter(values.values())).shape[0]
    gpus = [GpuInfo(index=i, name=name, power_limit_w=limit) for i in range(n)]
    return recording_from_arrays(T0 + 0.1 * np.arange(t_n), values, gpus=gpus)


def test_idle_with_a_model_loaded_and_no_power_limit_in_the_file() -> None:
    """Regression: power scaled to the window's own maximum made a loaded idle H100 look busy."""
    rng = np.random.default_rng(0)
    power = 120.0 + rng.normal(0, 0.3, (8, 600))
    rec = _rec(600, {Metric.POWER_AVG_W: power, Metric.KERNEL_BUSY_RATIO: np.zeros((8, 600))})
    d = diagnose(rec)
    assert d.verdict is Verdict.IDLE
    assert d.evidence["power_reference_w"] == 700.0
    assert d.evidence["power_reference_source"] == "gpu_model"
    assert d.evidence["idle_power_source"] == ["no_kernel_samples"]


def _tp_stage_sm(rng: np.random.Generator, n: int) -> np.ndarray:
    """A TP stage at 10 Hz: works at SM ~0.55 (all-reduce waits) with a dip every 0.4 s."""
    sm = 0.55 + rng.normal(0, 0.01, n)
    sm[::4] = 0.12
    return np.clip(sm, 0, 1)


def test_tp_stage_plateau_is_its_compute_level_when_power_says_it_works() -> None:
    rng = np.random.default_rng(1)
    sm = np.stack([_tp_stage_sm(rng, 600) for _ in range(2)])
    values = {
        Metric.SM_ACTIVE_RATIO: sm,
        Metric.KERNEL_BUSY_RATIO: np.ones((2, 600)),
        Metric.POWER_AVG_W: np.full((2, 600), 440.0),
    }
    rec = _rec(600, values)
    grid = resample(rec, (0, 1), list(values), step_s=0.1, max_gap_steps=2.5)
    lv = learn_levels(grid, rec, OPTS)
    assert lv.compute_level_source == (LEVEL_PLATEAU, LEVEL_PLATEAU)
    assert lv.compute_sm_by_gpu is not None and 0.5 < lv.compute_sm_by_gpu[0] < 0.6
    # the same at spin-level power (a serialized stage averaged over turns): no plateau
    values[Metric.POWER_AVG_W] = np.full((2, 600), 170.0)
    rec = _rec(600, values)
    grid = resample(rec, (0, 1), list(values), step_s=0.1, max_gap_steps=2.5)
    assert learn_levels(grid, rec, OPTS).compute_level_source == ("assumed", "assumed")


def test_half_busy_stage_at_mid_power_is_no_plateau_and_gets_a_range() -> None:
    """Regression: pp8-async at 1 s (SM ~0.49, dips to 0.33, ~300 W of 600 W) took its average
    for its compute level at some window lengths; the bubble read 0.08 instead of 0.43."""
    rng = np.random.default_rng(3)
    sm = np.clip(0.49 + rng.normal(0, 0.005, (8, 120)), 0, 1)
    sm[:, ::10] = 0.33  # a request ends, a prefill: the busy share dips
    values = {
        Metric.SM_ACTIVE_RATIO: sm,
        Metric.KERNEL_BUSY_RATIO: np.ones((8, 120)),
        Metric.POWER_AVG_W: 150.0 + 300.0 * sm,
    }
    name = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    gpus = [GpuInfo(index=i, name=name, power_limit_w=600.0) for i in range(8)]
    rec = recording_from_arrays(T0 + np.arange(120.0), values, gpus=gpus)
    topo = Topology(stages=tuple((g,) for g in range(8)))
    ev = diagnose(rec, topo).evidence
    assert set(ev["compute_level_source"].values()) == {"assumed"}  # type: ignore[union-attr]
    # The level lies between the highest sample and 1: occupancy 0.48/0.5..0.48/1; and power
    # caps the busy share: waiting draws 156 W (the line 150 + 300 x SM at the spin level
    # 0.02), working at least 55% of 600 W, so at most (mean draw - 156) / (330 - 156).
    lo, hi = ev["bubble_ratio_low"], ev["bubble_ratio_high"]
    assert isinstance(lo, float) and isinstance(hi, float) and isinstance(ev["bubble_ratio"], float)
    assert lo < ev["bubble_ratio"] < hi
    assert hi == pytest.approx(1 - float(np.mean(sm - 0.02)) / 0.98, abs=0.02)
    cap = 300.0 * float(np.mean(sm - 0.02)) / (330.0 - 156.0)
    assert lo == pytest.approx(1 - cap, abs=0.02)
    assert "highest sample" in str(ev["bubble_range_reason"])
    assert "power caps it" in str(ev["bubble_range_reason"])
    c_lo, c_hi = ev["concurrency_low"], ev["concurrency_high"]
    assert isinstance(c_lo, float) and isinstance(c_hi, float)
    assert c_lo == pytest.approx(8 * (1 - hi), abs=0.01)


def test_a_gpu_that_computed_flat_out_sets_the_level_of_its_job() -> None:
    rng = np.random.default_rng(2)
    light = np.clip(0.45 + rng.normal(0, 0.02, 600), 0, 1)  # averages of work and waiting
    heavy = np.clip(0.85 + rng.normal(0, 0.02, 600), 0, 1)
    values = {
        Metric.SM_ACTIVE_RATIO: np.stack([light, heavy]),
        Metric.POWER_AVG_W: np.full((2, 600), 450.0),
        Metric.KERNEL_BUSY_RATIO: np.ones((2, 600)),
    }
    rec = _rec(600, values)
    grid = resample(rec, (0, 1), list(values), step_s=0.1, max_gap_steps=2.5)
    lv = learn_levels(grid, rec, OPTS)
    assert lv.compute_level_source == (LEVEL_MODEL, LEVEL_LEARNED)
    assert lv.compute_sm_by_gpu is not None
    assert lv.compute_sm_by_gpu[0] == pytest.approx(lv.compute_sm_by_gpu[1])


def _window(kb: np.ndarray, occ: np.ndarray, power: np.ndarray | None = None) -> GpuWindow:
    n = kb.shape[0]
    return GpuWindow(tuple(range(n)), 0.1, occ, kb, power)


def _levels(n: int):
    """Levels of n idle H100s: 120 W with no kernel running."""
    values = {
        Metric.POWER_AVG_W: np.full((n, 20), 120.0),
        Metric.KERNEL_BUSY_RATIO: np.zeros((n, 20)),
    }
    rec = _rec(20, values)
    grid = resample(rec, tuple(range(n)), list(values), step_s=0.1, max_gap_steps=2.5)
    return learn_levels(grid, rec, OPTS)


def test_collective_wait_names_the_holding_and_waiting_gpus() -> None:
    t = 600
    kb = np.ones((4, t))
    occ = np.zeros((4, t))
    kb[0] = 0.05  # rank 0 writes a checkpoint: no kernel
    kb[0, :100] = 1.0  # ... after working with the others for 10 s
    occ[:, :100] = 0.9
    power = np.full((4, t), 155.0)
    power[0] = 140.0
    f = collective_wait_finding(_window(kb, occ, power), _levels(4), OPTS)
    assert f is not None and f.verdict is Verdict.COLLECTIVE_WAIT
    assert f.evidence["holding_gpus"] == [0] and f.evidence["waiting_gpus"] == [1, 2, 3]
    assert f.evidence["share_ratio"] == pytest.approx(500 / 600, abs=0.01)
    assert f.evidence["ongoing_s"] == pytest.approx(50.0, abs=0.2)
    # three waiting GPUs at 35 W above the 120 W idle for 50 s
    assert f.evidence["energy_j"] == pytest.approx(3 * 35.0 * 50.0, rel=0.02)


def test_no_collective_wait_when_everyone_works_or_nothing_says_so() -> None:
    kb = np.ones((4, 300))
    assert collective_wait_finding(_window(kb, np.full((4, 300), 0.8)), _levels(4), OPTS) is None
    both = _window(kb, np.zeros((4, 300)))
    assert collective_wait_finding(both, _levels(4), OPTS) is None  # nobody holds
    no_util = GpuWindow((0, 1), 0.1, np.zeros((2, 300)), None, None)
    assert collective_wait_finding(no_util, _levels(2), OPTS) is None
    # a GPU with no model in memory is not part of the job: it holds nothing
    kb[0] = 0.0
    mem = np.full((4, 300), 40e9)
    mem[0] = 0.3e9
    w = GpuWindow((0, 1, 2, 3), 0.1, np.zeros((4, 300)), kb, None, mem)
    assert collective_wait_finding(w, _levels(4), OPTS) is None


def test_underfed_only_with_gaps_and_little_work() -> None:
    kb = np.full((4, 300), 0.15)
    occ = np.full((4, 300), 0.1)
    f = underfed_finding(_window(kb, occ), (0, 1, 2, 3), _levels(4), OPTS)
    assert f is not None and f.verdict is Verdict.UNDERFED
    assert f.evidence["kernel_gap_ratio"] == pytest.approx(0.85)
    assert underfed_finding(_window(np.ones((4, 300)), occ), (0, 1, 2, 3), _levels(4), OPTS) is None
    busy = _window(kb, np.full((4, 300), 0.8))
    assert underfed_finding(busy, (0, 1, 2, 3), _levels(4), OPTS) is None
    idle = _window(np.zeros((4, 300)), np.zeros((4, 300)))
    assert underfed_finding(idle, (0, 1, 2, 3), _levels(4), OPTS) is None


def test_schedule_bubble_and_its_checks() -> None:
    assert PipelineSchedule("gpipe", 4).bubble_ratio(2) == pytest.approx(0.2)
    assert PipelineSchedule("1f1b", 16).bubble_ratio(4) == pytest.approx(3 / 19)
    assert PipelineSchedule("gpipe", 1).max_in_flight(4) == 1
    with pytest.raises(ValueError, match="unknown schedule"):
        PipelineSchedule("zigzag", 4)
    with pytest.raises(ValueError, match="micro_batches"):
        PipelineSchedule("gpipe", 0)


def _pipeline(occ_stage: list[float], *, jitter: float = 0.02, kb: float = 1.0, seed: int = 0):
    """PP stages with SM activity from occupancy (compute level 0.85 learned by prefill bursts)."""
    rng = np.random.default_rng(seed)
    p = len(occ_stage)
    sm = np.stack([0.02 + 0.83 * o + rng.normal(0, jitter, 1200) for o in occ_stage])
    sm[:, ::100] = 0.9  # flat-out bursts: the compute level is learned
    power = 150.0 + 380.0 * np.clip(sm, 0, 1)
    values = {
        Metric.SM_ACTIVE_RATIO: np.clip(sm, 0, 1),
        Metric.KERNEL_BUSY_RATIO: np.full((p, 1200), kb),
        Metric.POWER_AVG_W: power,
    }
    return _rec(
        1200, values, name="NVIDIA RTX PRO 6000 Blackwell Server Edition"
    ), Topology.from_sizes(p)


def test_serialized_is_about_one_micro_batch_in_flight_whatever_the_size() -> None:
    rec, topo = _pipeline([0.5, 0.5])  # PP2, one micro-batch: each stage half the time
    d = diagnose(rec, topo)
    assert d.verdict is Verdict.SERIALIZED
    assert d.evidence["micro_batches_in_flight"] == pytest.approx(1.0, abs=0.15)
    rec, topo = _pipeline([0.8, 0.8])  # PP2 GPipe m=4: 1.6 of 2
    d = diagnose(rec, topo, schedule=PipelineSchedule("gpipe", 4))
    assert d.verdict is Verdict.HEALTHY
    assert d.evidence["expected_bubble_ratio"] == pytest.approx(0.2)
    assert d.evidence["schedule_efficiency_ratio"] == pytest.approx(1.0, abs=0.1)
    assert "as good as its schedule allows" in d.findings[0].summary
    rec, topo = _pipeline([0.16] * 8)  # PP8 serialized: 1.3 of 8
    assert diagnose(rec, topo).verdict is Verdict.SERIALIZED


def test_launch_bound_from_power_and_utilisation_alone() -> None:
    """Regression: with power.draw + utilization.gpu only, graphs-off pipelines were not judged."""
    rng = np.random.default_rng(3)
    power = 300.0 + rng.normal(0, 5, (4, 600))
    for kb, expected in ((0.8, True), (1.0, False)):
        rec = _rec(
            600,
            {Metric.POWER_AVG_W: power, Metric.KERNEL_BUSY_RATIO: np.full((4, 600), kb)},
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        )
        d = diagnose(rec, Topology.from_sizes(4))
        assert d.has(Verdict.LAUNCH_BOUND) is expected, (kb, d.verdict)


def test_micro_batches_in_flight_against_what_the_settings_allow() -> None:
    from bubblewatch.rules.facts import build_facts
    from bubblewatch.topology.engine_config import EngineConfig

    rec, topo = _pipeline([0.8, 0.8])
    d = diagnose(rec, topo, schedule=PipelineSchedule("gpipe", 4))
    assert d.evidence["micro_batches_allowed"] == 2  # min(m=4, p=2)
    facts = build_facts(d, None, topo)
    assert facts.get("derived.micro_batches_allowed") == 2.0
    assert facts.get("derived.in_flight_ratio") == pytest.approx(0.8, abs=0.1)
    rec, topo = _pipeline([0.16] * 8)
    d = diagnose(rec, topo)
    facts = build_facts(d, EngineConfig(name="sglang", pp_size=8), topo)
    assert facts.get("derived.micro_batches_allowed") == 8.0  # a serving pipeline's pp_size
    assert facts.get("derived.in_flight_ratio") < 0.25


@pytest.mark.parametrize(
    ("watts", "verdict"), [(265.0, Verdict.SERIALIZED), (450.0, Verdict.HEALTHY)]
)
def test_power_decides_when_samples_average_the_stages_turns(
    watts: float, verdict: Verdict
) -> None:
    """PP2 at 1 s: SM ~0.45 flat on both stages (level unresolved). Half-way power is one
    micro-batch taking turns; working power is TP stages computing all the time (T13-like)."""
    rng = np.random.default_rng(4)
    n = 120
    values = {
        Metric.SM_ACTIVE_RATIO: np.clip(0.45 + rng.normal(0, 0.01, (2, n)), 0, 1),
        Metric.KERNEL_BUSY_RATIO: np.ones((2, n)),
        Metric.POWER_AVG_W: watts + rng.normal(0, 3, (2, n)),
    }
    rec = recording_from_arrays(
        T0 + np.arange(n, dtype=float),
        values,
        gpus=[GpuInfo(index=i, name=H100) for i in range(2)],
    )
    d = diagnose(rec, Topology.from_sizes(2))
    assert d.verdict is verdict
    if verdict is Verdict.SERIALIZED:
        assert d.findings[0].evidence["decided_by"] == "power"
