"""--gpu-model: a named model fills the GPUs a recording leaves unnamed, never overrides one."""

from __future__ import annotations

import numpy as np
import pytest

from bubblewatch.analysis.gpu_model import GivenGpuModel, check_gpu_model
from bubblewatch.detect.levels import power_average_by_gpu, power_reference
from bubblewatch.errors import InputError
from bubblewatch.model.gpu_models import EXAMPLE_NAMES, is_known, same_model
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import recording_from_arrays

A100, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"


def _recording(names: list[str]):
    gpus = [GpuInfo(index=i, name=n) for i, n in enumerate(names)]
    values = {Metric.POWER_AVG_W: np.full((len(names), 20), 150.0)}
    return recording_from_arrays(1e9 + np.arange(20.0), values, gpus=gpus, meta={"k": 1})


def test_unnamed_gpus_read_as_the_given_model() -> None:
    rec = _recording(["", ""])
    gpus = (0, 1)
    # No name: a 1 s average and no known limit.
    assert power_average_by_gpu(rec, gpus).tolist() == [1.0, 1.0]
    assert power_reference(rec, gpus) == (None, None)
    named = GivenGpuModel(A100).apply(rec)
    assert [g.name for g in named.gpus] == [A100, A100]
    # As if the file had named them: an A100's instant reading and its 400 W default.
    assert power_average_by_gpu(named, gpus).tolist() == [0.0, 0.0]
    assert power_reference(named, gpus) == (400.0, "gpu_model")
    assert named.meta == {"k": 1, "gpu_model_from": {"0": "option", "1": "option"}}


def test_the_recording_wins_and_a_different_model_is_said_once(capsys) -> None:
    rec = _recording([H100, ""])
    given = GivenGpuModel(A100)
    named = given.apply(rec)
    assert [g.name for g in named.gpus] == [H100, A100]
    assert named.meta["gpu_model_from"] == {"0": "recording", "1": "option"}
    err = capsys.readouterr().err
    assert "warning: --gpu-model 'NVIDIA A100-SXM4-80GB' is not used for GPU(s) 0" in err
    assert "'NVIDIA H100 80GB HBM3'" in err
    given.apply(rec)  # the next piece of the same recording: not said again
    assert capsys.readouterr().err == ""


def test_the_same_model_spelt_otherwise_is_no_disagreement(capsys) -> None:
    named = GivenGpuModel("A100-SXM4-40GB").apply(_recording([A100]))
    assert named.gpus[0].name == A100
    assert capsys.readouterr().err == ""


def test_a_gpu_with_samples_but_no_inventory_entry_is_named_too() -> None:
    rec = _recording(["", ""])
    rec = type(rec)(gpus=rec.gpus[:1], series=rec.series, meta=rec.meta)
    named = GivenGpuModel(A100).apply(rec)
    assert [(g.index, g.name) for g in named.gpus] == [(0, A100), (1, A100)]


@pytest.mark.parametrize("name", ["Some Future GPU", "", "  "])
def test_an_unknown_model_is_refused_with_known_ones(name: str) -> None:
    with pytest.raises(InputError) as e:
        check_gpu_model(name)
    assert e.value.path == "--gpu-model"
    assert "unknown GPU model" in str(e.value)
    assert "'NVIDIA A100-SXM4-80GB'" in str(e.value)


def test_example_names_are_known_and_distinct_models() -> None:
    assert all(is_known(n) for n in EXAMPLE_NAMES)
    for i, a in enumerate(EXAMPLE_NAMES):
        assert not any(same_model(a, b) for b in EXAMPLE_NAMES[i + 1 :]), a


def test_same_model() -> None:
    assert same_model("NVIDIA A100-SXM4-80GB", "a100 sxm4 40gb")
    assert not same_model("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe")
    assert same_model("Some Future GPU", "some future  gpu")
    assert not same_model("Some Future GPU", A100)
