"""The training-job simulator: schedules, stalls, idle with a model loaded, scenario checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bubblewatch.model.metrics import CLOCKS_EVENT_GPU_IDLE
from bubblewatch.sim import ScenarioError, TrainingScenario, load_scenario, simulate
from bubblewatch.sim.scenario import apply_overrides
from bubblewatch.sim.training_schedule import (
    BACKWARD,
    FORWARD,
    StepTemplate,
    rank_ops,
    step_template,
)
from bubblewatch.sim.training_spec import TrainingJobSpec


def stage_order(schedule: str, p: int, m: int, stage: int) -> list[tuple[int, int]]:
    """(kind, micro-batch) operations of `stage` in the order GPipe or 1F1B runs them."""
    return [(kind, mb) for kind, mb, _ in rank_ops(schedule, p, m, stage)]


def bubble_ratio(template: StepTemplate, p: int) -> float:
    """Share of stage-time idle within the makespan: (p - 1) / (m + p - 1) for equal stages."""
    busy = sum(template.busy_s(s) for s in range(p))
    return 1.0 - busy / (p * template.makespan_s)


TRAINING = (
    "dp8-training",
    "dp8-checkpoint-stall",
    "dp8-dataloader-stall",
    "dp8-hang",
    "fsdp8-offload",
    "idle-loaded",
    "pp2x8-gpipe",
    "pp4-1f1b",
    "pp4-gpipe-m1",
    "pp4-1f1b-m4",
    "pp4-interleaved",
    "pp4-1f1b-imbalanced",
    "pp4-1f1b-throttled",
    "pp4-1f1b-loader",
)


@pytest.mark.parametrize("name", TRAINING)
def test_training_builtins_load(name: str) -> None:
    sc = load_scenario(name)
    assert isinstance(sc, TrainingScenario) and sc.name == name
    assert sc.engine == sc.launcher and sc.engine_argv == sc.argv


@pytest.mark.parametrize(
    ("schedule", "p", "m"), [("gpipe", 2, 4), ("gpipe", 4, 1), ("1f1b", 4, 16), ("1f1b", 8, 3)]
)
def test_equal_stages_leave_the_bubble_the_formula_says(schedule: str, p: int, m: int) -> None:
    job = TrainingJobSpec(schedule=schedule, pp_size=p, micro_batches=m, send_s=0.0)
    t = step_template(job)
    assert bubble_ratio(t, p) == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)
    assert len(t.stage) == 2 * p * m  # every forward and backward of every micro-batch


@pytest.mark.parametrize(("p", "m", "v"), [(4, 4, 2), (4, 8, 2), (4, 12, 3), (2, 4, 2), (8, 16, 4)])
def test_interleaved_stages_leave_the_interleaved_bubble(p: int, m: int, v: int) -> None:
    job = TrainingJobSpec(
        schedule="interleaved", pp_size=p, micro_batches=m, virtual_stages=v, send_s=0.0
    )
    t = step_template(job)
    assert bubble_ratio(t, p) == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-9)
    assert len(t.stage) == 2 * p * m * v  # every chunk's forward and backward
    one = step_template(TrainingJobSpec(schedule="1f1b", pp_size=p, micro_batches=m, send_s=0.0))
    assert t.busy_s(0) == pytest.approx(one.busy_s(0))  # the same work, cut in v chunks


def test_interleaved_order_is_megatrons() -> None:
    """Megatron's schedule table: groups of p micro-batches through chunk 0, then chunk 1;
    rank r warms up with (p - r - 1) * 2 + (v - 1) * p forwards (schedules.py)."""
    ops = rank_ops("interleaved", 4, 8, 0, 2)
    assert ops[:8] == [(FORWARD, mb, 0) for mb in range(4)] + [(FORWARD, mb, 1) for mb in range(4)]
    warm = (4 - 0 - 1) * 2 + (2 - 1) * 4
    assert all(k == FORWARD for k, _, _ in ops[:warm]) and ops[warm + 1][0] == BACKWARD
    assert ops[warm + 1] == (BACKWARD, 0, 1)  # backwards take the chunks in reverse
    last = rank_ops("interleaved", 4, 8, 3, 2)
    assert sum(k == FORWARD for k, _, _ in last[: (2 - 1) * 4 + 1]) == 5
    assert last[5] == (BACKWARD, 0, 1)
    all_warm = rank_ops("interleaved", 4, 4, 0, 2)  # m == p: every forward first
    assert [k for k, _, _ in all_warm] == [FORWARD] * 8 + [BACKWARD] * 8


def test_a_throttled_gpu_stretches_its_stage() -> None:
    plain = simulate(apply_overrides(load_scenario("pp4-1f1b"), {"job.micro_batches": 8}), 20.0)
    slow = simulate(load_scenario("pp4-1f1b-throttled"), duration_s=20.0, seed=0)
    busy = [s.busy_ratio for s in slow.truth.stages]
    assert busy[2] == max(busy) and busy[2] > 1.25 * np.mean(busy[:2] + busy[3:])
    assert busy[0] < plain.truth.stages[0].busy_ratio  # the others wait on stage 2
    reasons = slow.timeline.field("clocks_event_reasons").astype(np.int64)
    assert (reasons[2] & 0x4).any() and not (reasons[1] & 0x4).any()  # SwPowerCap on GPU 2


def test_1f1b_order_warms_up_then_alternates() -> None:
    first = stage_order("1f1b", 4, 6, 0)
    assert first[:4] == [(FORWARD, 0), (FORWARD, 1), (FORWARD, 2), (FORWARD, 3)]
    assert first[4:6] == [(BACKWARD, 0), (FORWARD, 4)]
    last = stage_order("1f1b", 4, 6, 3)
    assert last[:4] == [(FORWARD, 0), (BACKWARD, 0), (FORWARD, 1), (BACKWARD, 1)]
    assert stage_order("gpipe", 2, 3, 1) == [
        (FORWARD, 0),
        (FORWARD, 1),
        (FORWARD, 2),
        (BACKWARD, 2),
        (BACKWARD, 1),
        (BACKWARD, 0),
    ]


def test_data_parallel_gpus_work_in_phase() -> None:
    res = simulate(load_scenario("dp8-training"), duration_s=20.0, seed=0)
    busy = np.array([s.busy_ratio for s in res.truth.stages])
    assert busy.min() > 0.85 and np.ptp(busy) < 1e-9  # every rank does the same
    assert res.topology is None and res.topologies == ()
    power = np.array([s.power_w for s in res.truth.stages])
    assert 550 < power.mean() < 700  # real DDP on H100: ~690 W at SM 0.88


def test_checkpoint_stall_holds_rank_0_while_the_others_spin() -> None:
    res = simulate(load_scenario("dp8-checkpoint-stall"), duration_s=20.0, seed=0)
    s0, s1 = res.truth.stages[0], res.truth.stages[1]
    assert s0.kernel_busy_ratio < 0.3 and s1.kernel_busy_ratio > 0.98
    assert s1.spin_ratio > 0.7 and s0.spin_ratio < 0.05
    assert 140 < s1.power_w < 300  # spinning at ~155 W between short bursts of work


def test_hang_lasts_to_the_end() -> None:
    res = simulate(load_scenario("dp8-hang"), duration_s=30.0, seed=0)
    kb = res.timeline.field("kernel_busy")
    after = int(16.0 / res.timeline.dt_s)
    assert kb[5, after:].max() < 1e-6 and kb[0, after:].min() > 0.99


def test_idle_with_a_model_loaded_stays_in_p0() -> None:
    res = simulate(load_scenario("idle-loaded"), duration_s=5.0, seed=0)
    tl = res.timeline
    assert tl.field("kernel_busy").max() == 0.0
    np.testing.assert_allclose(tl.field("power_w"), 120.0, atol=0.5)
    reasons = tl.field("clocks_event_reasons").astype(np.int64)
    assert not (reasons & CLOCKS_EVENT_GPU_IDLE).any()  # B1: no GpuIdle at 120 W


def test_pipeline_busy_share_follows_the_schedule() -> None:
    res = simulate(load_scenario("pp2x8-gpipe"), duration_s=20.0, seed=0)
    assert res.topology is not None and res.topology.stages[1] == tuple(range(8, 16))
    busy = res.truth.stages[0].busy_ratio
    assert busy == pytest.approx(0.8, abs=0.06)  # 1 - 20% bubble, minus send and optimizer
    serial = simulate(load_scenario("pp4-gpipe-m1"), duration_s=20.0, seed=0)
    assert serial.truth.replicas[0].busy_sum == pytest.approx(1.0, abs=0.1)
    assert serial.truth.replicas[0].max_in_flight == 1


def test_same_seed_same_timeline() -> None:
    sc = load_scenario("dp8-dataloader-stall")
    a = simulate(sc, duration_s=10.0, seed=3).timeline.data
    b = simulate(sc, duration_s=10.0, seed=3).timeline.data
    np.testing.assert_array_equal(a, b)


def test_overrides_apply_to_training_jobs() -> None:
    sc = apply_overrides(load_scenario("pp4-gpipe-m1"), {"job.micro_batches": 8})
    assert sc.job.micro_batches == 8


BASE = Path(__file__).resolve().parents[2] / "bubblewatch" / "scenarios" / "pp4-1f1b.yaml"


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (("schedule: 1f1b", "schedule: zigzag"), "job.schedule", "must be one of"),
        (("schedule: 1f1b", "schedule: none"), "job.pp_size", "must be 1 with schedule none"),
        (
            ("stage_forward_s: [0.02]", "stage_forward_s: [0.02, 0.03]"),
            "job.stage_forward_s",
            "1 or pp_size=4",
        ),
        (("micro_batches: 16", "micro_batches: 0"), "job.micro_batches", ">= 1"),
        (
            (
                "  optimizer_s: 0.01\n",
                "  optimizer_s: 0.01\n  stalls: [{kind: nap, duration_s: 1}]\n",
            ),
            "job.stalls[0].kind",
            "must be one of checkpoint",
        ),
        (
            (
                "  optimizer_s: 0.01\n",
                "  optimizer_s: 0.01\n"
                "  stalls: [{kind: checkpoint, duration_s: 1, holding_gpus: [9]}]\n",
            ),
            "job.stalls[0].holding_gpus",
            "beyond the job's 4 GPUs",
        ),
        (
            (
                "  optimizer_s: 0.01\n",
                "  optimizer_s: 0.01\n  stalls: [{kind: checkpoint, every_steps: 2}]\n",
            ),
            "job.stalls[0].duration_s",
            "needs a duration > 0",
        ),
        (("  send_s: 0.002\n", "  send_s: 0.002\n  sprint: true\n"), "job.sprint", "unknown key"),
        (
            ("schedule: 1f1b", "schedule: interleaved"),
            "job.virtual_stages",
            "needs virtual_stages >= 2",
        ),
        (
            (
                "schedule: 1f1b\n  pp_size: 4\n  micro_batches: 16",
                "schedule: interleaved\n  pp_size: 4\n  micro_batches: 6\n  virtual_stages: 2",
            ),
            "job.micro_batches",
            "divisible by pp_size=4",
        ),
        (
            ("micro_batches: 16", "micro_batches: 16\n  virtual_stages: 2"),
            "job.virtual_stages",
            "must be 1 with schedule 1f1b",
        ),
    ],
)
def test_bad_training_files_name_the_field(
    tmp_path: Path, edit: tuple[str, str], field: str, message: str
) -> None:
    text = BASE.read_text()
    assert edit[0] in text
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert err.value.field == field and message in str(err.value), str(err.value)
    assert err.value.path == str(path)
