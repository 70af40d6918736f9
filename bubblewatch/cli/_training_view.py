"""How `topology` and `analyze` show a training job: layout, schedule and rank -> stage map."""

from __future__ import annotations

from bubblewatch.model.topology import Topology
from bubblewatch.topology.training.layout import ParallelLayout


def training_lines(lay: ParallelLayout, topology: Topology, first_stage: int = 0) -> list[str]:
    """A few indented lines for a pipeline's block in the human report."""
    via = "" if lay.launcher in ("none", "unknown") else f" via {lay.launcher}"
    sizes = f"pp={lay.pp} tp={lay.tp} dp={lay.dp}"
    if lay.cp > 1:
        sizes += f" cp={lay.cp}"
    if lay.ep > 1:
        sizes += f" ep={lay.ep}"
    if lay.virtual_stages > 1:
        sizes += f" v={lay.virtual_stages}"
    out = [f"  training: {lay.framework}{via}, world {lay.world_size}: {sizes}"]
    batch = []
    if lay.micro_batch_size is not None:
        batch.append(f"micro batch {lay.micro_batch_size}")
    if lay.global_batch_size is not None:
        batch.append(f"global batch {lay.global_batch_size}")
    if lay.micro_batches is not None:
        batch.append(f"m={lay.micro_batches} micro-batches per step")
    if batch:
        out.append("  batch:    " + ", ".join(batch))
    if not lay.is_pipeline:
        out.append("  schedule: none (data parallel, no pipeline)")
    else:
        e = lay.expectation()
        text = lay.schedule or "unknown"
        if e is not None:
            text += f"; expected bubble {e.formula}"
        out.append(f"  schedule: {text}")
    if lay.gpu_ranks:
        for s, gpus in enumerate(topology.stages):
            ranks = [lay.gpu_ranks[g] for g in gpus if g in lay.gpu_ranks]
            if ranks:
                label = "stage" if not lay.is_pipeline else f"stage {first_stage + s}"
                out.append(f"  ranks:    {label} <- ranks {_spans(ranks)} (GPUs {_spans(gpus)})")
    out.append(f"  order:    ranks numbered {'-'.join(lay.order)} (fastest first)")
    if lay.config_file:
        out.append(f"  config:   {lay.config_file}")
    out.extend(f"  note:     {n}" for n in lay.notes)
    return out


def _spans(values: tuple[int, ...] | list[int]) -> str:
    """1,2,3,5 -> '1-3,5' (in the given order when it is not sorted)."""
    vals = list(values)
    if vals != sorted(vals):
        return ",".join(map(str, vals))
    parts: list[str] = []
    start = prev = vals[0]
    for v in vals[1:]:
        if v == prev + 1:
            prev = v
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = v
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)
