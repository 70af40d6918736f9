"""Several files as one recording: one file per node of a multi-node job."""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.model import Metric
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.recording import recording_from_arrays
from bubblewatch.model.samples import Event
from bubblewatch.sources.side_by_side import join_side_by_side


def _node(power: float, n: int = 2):
    t = 1775333003.0 + np.arange(5, dtype=np.float64)
    rec = recording_from_arrays(
        t,
        {Metric.POWER_AVG_W: np.full((n, 5), power)},
        gpus=[GpuInfo(index=i, name="NVIDIA H100 80GB HBM3") for i in range(n)],
    )
    from dataclasses import replace

    return replace(rec, events=(Event(float(t[1]), "annotation", 1, {"value": "steady"}),))


def test_gpus_numbered_file_after_file_with_their_origin() -> None:
    rec = join_side_by_side([_node(100.0), _node(200.0, 3)], names=["node0.csv", "node1.csv"])
    assert rec.gpu_indices == (0, 1, 2, 3, 4)
    assert [g.host for g in rec.gpus] == ["node0.csv"] * 2 + ["node1.csv"] * 3
    assert rec.gpus[3].name == "NVIDIA H100 80GB HBM3"
    np.testing.assert_allclose(rec.series[4].values[Metric.POWER_AVG_W], 200.0)
    assert sorted(e.gpu for e in rec.events) == [1, 3]  # node 1's GPU 1 is now GPU 3
    assert rec.meta["sources"] == [
        {"file": "node0.csv", "gpus": 2},
        {"file": "node1.csv", "gpus": 3},
    ]


def test_one_recording_is_returned_as_is_and_none_is_an_error() -> None:
    one = _node(1.0)
    assert join_side_by_side([one]) is one
    with pytest.raises(ValueError):
        join_side_by_side([])
