"""Numbers at the edge of a float given to the simulator: a clear error, exit 2.

Pins (issue 22, item 8): `simulate --duration 1e308` (and `diagnose
--simulate ... --duration 1e308`) was an OverflowError from the timeline
size check; `--set hardware.gpu.tensor_flops_per_s=1.0e-308` simulated a run
whose times were inf and failed writing the trace ("Out of range float values
are not JSON compliant").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bubblewatch.limits import SIM_MAX_GPU_CELLS, SIM_MAX_TOKEN_LAYER_S

from .test_recorded_inputs import refused


@pytest.mark.parametrize("scenario", ["pp2-async", "pp4-1f1b"], ids=["serving", "training"])
def test_simulate_duration_1e308(tmp_path: Path, capsys, scenario: str) -> None:
    out = tmp_path / "out.jsonl"
    refused(capsys, ["simulate", scenario, "-o", str(out), "--duration", "1e308"],
            "field 'duration_s'", f"more than {SIM_MAX_GPU_CELLS} timeline cells")  # fmt: skip
    assert not out.exists()


def test_diagnose_simulate_duration_1e308(capsys) -> None:
    refused(capsys, ["diagnose", "--simulate", "pp2-async", "--duration", "1e308"],
            f"more than {SIM_MAX_GPU_CELLS} timeline cells")  # fmt: skip


@pytest.mark.parametrize(
    "key",
    [
        "hardware.gpu.tensor_flops_per_s",
        "hardware.gpu.memory_bandwidth_bytes_per_s",
        "hardware.interconnect.bandwidth_bytes_per_s",
    ],
)
def test_rates_so_small_that_a_token_never_finishes(tmp_path: Path, capsys, key: str) -> None:
    out = tmp_path / "out.jsonl"
    refused(capsys, ["simulate", "pp2-async", "-o", str(out), "--duration", "5",
                     "--set", f"{key}=1.0e-308"],
            "field 'hardware'", "one token through one layer would take inf s",
            f"at most {SIM_MAX_TOKEN_LAYER_S:g} s")  # fmt: skip
    assert not out.exists()
