"""Checks across the fields of a training scenario, each naming the dotted field at fault."""

from __future__ import annotations

from collections.abc import Callable

from bubblewatch.sim.errors import ScenarioError
from bubblewatch.sim.training_spec import STALL_KINDS, TrainingScenario

Fail = Callable[[str, str], ScenarioError]


def training_cross_checks(sc: TrainingScenario, fail: Fail) -> None:
    """Raise (via `fail(field, message)`) at the first field that contradicts another."""
    gpu, job = sc.hardware.gpu, sc.job
    if not gpu.idle_power_w <= gpu.spin_power_w <= gpu.peak_power_w:
        raise fail(
            "hardware.gpu.spin_power_w",
            f"expected idle_power_w <= spin_power_w <= peak_power_w, got {gpu.idle_power_w:g}, "
            f"{gpu.spin_power_w:g}, {gpu.peak_power_w:g}",
        )
    if job.schedule == "none" and job.pp_size != 1:
        raise fail(
            "job.pp_size", "must be 1 with schedule none (give gpipe or 1f1b for a pipeline)"
        )
    if job.schedule != "none" and job.pp_size < 2:
        raise fail("job.pp_size", f"a {job.schedule} pipeline needs pp_size >= 2")
    if job.schedule == "interleaved" and job.virtual_stages < 2:
        raise fail("job.virtual_stages", "an interleaved schedule needs virtual_stages >= 2")
    if job.schedule == "interleaved" and job.micro_batches % job.pp_size:
        # Megatron core 0.9 refuses this; later versions run a remainder group, whose timing
        # the simulator does not claim to reproduce.
        raise fail(
            "job.micro_batches",
            f"an interleaved schedule needs micro_batches divisible by pp_size={job.pp_size}, "
            f"got {job.micro_batches}",
        )
    if job.schedule != "interleaved" and job.virtual_stages != 1:
        raise fail(
            "job.virtual_stages", f"must be 1 with schedule {job.schedule} (give interleaved)"
        )
    if len(job.stage_forward_s) not in (1, job.pp_size):
        raise fail(
            "job.stage_forward_s",
            f"needs 1 or pp_size={job.pp_size} entries, got {len(job.stage_forward_s)}",
        )
    if any(t <= 0 for t in job.stage_forward_s):
        raise fail("job.stage_forward_s", "stage times must be > 0")
    if job.kernel_gap_ratio >= 1:
        raise fail("job.kernel_gap_ratio", "must be below 1 (some kernels must run)")
    if not sc.argv:
        raise fail("argv", "must list the launch command, e.g. [torchrun, --nproc_per_node=8, ...]")
    for i, st in enumerate(job.stalls):
        key = f"job.stalls[{i}]"
        if st.kind not in STALL_KINDS:
            raise fail(f"{key}.kind", f"must be one of {', '.join(STALL_KINDS)}, got {st.kind!r}")
        if st.kind != "hang" and st.duration_s <= 0:
            raise fail(f"{key}.duration_s", f"a {st.kind} stall needs a duration > 0")
        if not st.holding_gpus:
            raise fail(f"{key}.holding_gpus", "must name at least one GPU")
        bad = [g for g in st.holding_gpus if g >= job.n_gpus]
        if bad:
            raise fail(f"{key}.holding_gpus", f"GPU(s) {bad} beyond the job's {job.n_gpus} GPUs")
    for i, f in enumerate(sc.faults):
        if f.gpu >= job.n_gpus:
            raise fail(f"faults[{i}].gpu", f"must be a GPU index below {job.n_gpus}, got {f.gpu}")
