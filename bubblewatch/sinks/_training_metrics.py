"""Rows of the training series: a job's layout on an `_info` series, the schedule's bubble.

Parsed settings only, never argv or env (they may carry secrets). Labels of
unknown values are empty strings, as on the other `_info` series.
"""

from __future__ import annotations

from collections.abc import Iterator

from bubblewatch.sinks.snapshot import ExporterSnapshot

Row = tuple[tuple[str, ...], float]

TRAINING_INFO_LABELS = (
    "pipeline",
    "framework",
    "launcher",
    "pp_size",
    "tp_size",
    "dp_size",
    "cp_size",
    "ep_size",
    "virtual_stages",
    "micro_batch_size",
    "global_batch_size",
    "micro_batches",
    "schedule",
)


def _text(v: object) -> str:
    return "" if v is None else str(v)


def training_info(s: ExporterSnapshot) -> Iterator[Row]:
    for p in s.pipelines:
        lay = None if p.engine is None else p.engine.training
        if lay is None:
            continue
        yield (
            p.pipeline, lay.framework, lay.launcher, str(lay.pp), str(lay.tp), str(lay.dp),
            str(lay.cp), str(lay.ep), str(lay.virtual_stages), _text(lay.micro_batch_size),
            _text(lay.global_batch_size), _text(lay.micro_batches), _text(lay.schedule),
        ), 1.0  # fmt: skip


def expected_bubble(s: ExporterSnapshot) -> Iterator[Row]:
    for p in s.pipelines:
        lay = None if p.engine is None else p.engine.training
        e = None if lay is None else lay.expectation()
        if e is not None:
            yield (p.pipeline,), e.bubble_ratio
