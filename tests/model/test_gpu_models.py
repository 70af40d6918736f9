"""GPU models by name: default power limits and what NVML's power reading averages."""

from __future__ import annotations

import pytest

from bubblewatch.model.gpu_models import (
    POWER_READING_AVERAGE_S,
    POWER_READING_INSTANT_S,
    known_power_limit_w,
    power_average_s,
    power_reading_average_s,
)


@pytest.mark.parametrize(
    ("name", "limit"),
    [
        ("NVIDIA H100 80GB HBM3", 700.0),
        ("NVIDIA H100 PCIe", 350.0),
        ("NVIDIA A100-SXM4-80GB", 400.0),
        ("NVIDIA A100 80GB PCIe", 300.0),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 600.0),
        ("NVIDIA L40S", 350.0),
        ("Tesla T4", 70.0),
        ("NVIDIA GeForce RTX 4090", 450.0),
        ("Some Future GPU", None),
        ("", None),
    ],
)
def test_known_power_limits(name: str, limit: float | None) -> None:
    assert known_power_limit_w(name) == limit


@pytest.mark.parametrize(
    ("name", "average_s"),
    [
        # NVML: "On Ampere (except GA100) or newer GPUs, returns average power draw over
        # 1 sec. On GA100 and older architectures, instantaneous power is returned."
        ("NVIDIA A100-SXM4-80GB", POWER_READING_INSTANT_S),
        ("NVIDIA A100 80GB PCIe", POWER_READING_INSTANT_S),
        ("NVIDIA A100-PCIE-40GB", POWER_READING_INSTANT_S),
        ("NVIDIA A800-SXM4-80GB", POWER_READING_INSTANT_S),
        ("NVIDIA A30", POWER_READING_INSTANT_S),
        ("Tesla V100-SXM2-32GB", POWER_READING_INSTANT_S),
        ("Tesla T4", POWER_READING_INSTANT_S),
        ("Tesla P100-PCIE-16GB", POWER_READING_INSTANT_S),
        ("NVIDIA TITAN X (Pascal)", POWER_READING_INSTANT_S),
        ("NVIDIA A10", POWER_READING_AVERAGE_S),  # GA102: Ampere, not GA100
        ("NVIDIA A40", POWER_READING_AVERAGE_S),
        ("NVIDIA RTX A6000", POWER_READING_AVERAGE_S),
        ("NVIDIA GeForce RTX 3090", POWER_READING_AVERAGE_S),
        ("NVIDIA L4", POWER_READING_AVERAGE_S),
        ("NVIDIA H100 80GB HBM3", POWER_READING_AVERAGE_S),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", POWER_READING_AVERAGE_S),
        ("Some Future GPU", None),
        ("", None),
    ],
)
def test_what_the_power_reading_averages(name: str, average_s: float | None) -> None:
    assert power_reading_average_s(name) == average_s
    # Unknown (or unnamed): taken for a 1 s average, as before the table knew any model.
    assert power_average_s(name) == (POWER_READING_AVERAGE_S if average_s is None else average_s)
    assert power_average_s(None) == POWER_READING_AVERAGE_S
