"""The fake libnvidia-ml.so.1 through the real pynvml: signatures, layouts, NVML's averaging."""

from __future__ import annotations

from dataclasses import replace

import pynvml
import pytest

from fake_nvml.timeline import ramp


@pytest.fixture
def nvml_ramp(fake_nvml):
    fake = fake_nvml(ramp(2, seconds=10.0))
    pynvml.nvmlInit()
    yield fake
    pynvml.nvmlShutdown()


def test_identity_through_real_pynvml(nvml_ramp):
    assert pynvml.nvmlDeviceGetCount() == 2
    h = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetIndex(h) == 1
    assert pynvml.nvmlDeviceGetUUID(h).endswith("000000000001")
    assert pynvml.nvmlDeviceGetPciInfo(h).busId == "00000000:11:00.0"
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 700_000


def test_power_average_is_the_last_second_and_instant_is_the_cell(nvml_ramp):
    tl = nvml_ramp.timeline
    t = nvml_ramp.at(3.3012)  # mid-cell: cell boundaries are ambiguous in floating point
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    avg_mw = pynvml.nvmlDeviceGetPowerUsage(h)
    assert avg_mw == pytest.approx(1000 * tl.mean(0, "power_w", t - 1, t), abs=1)
    fv = pynvml.nvmlDeviceGetFieldValues(h, [(186, 0)])
    assert fv[0].nvmlReturn == 0
    assert fv[0].value.uiVal == pytest.approx(1000 * tl.at(0, "power_w", t), abs=1)
    assert fv[0].timestamp == round((1_700_000_000.0 + t) * 1e6)
    # The average lags: past the wave's peak (t = 2.5 s) it reads above the instant value.
    assert avg_mw > fv[0].value.uiVal + 10_000


def test_power_usage_of_a_ga100_is_the_instant_cell(fake_nvml):
    # NVML: GA100 and older return instantaneous power from nvmlDeviceGetPowerUsage.
    tl = replace(ramp(), name="NVIDIA A100-SXM4-80GB")
    fake = fake_nvml(tl)
    pynvml.nvmlInit()
    try:
        t = fake.at(3.3012)
        mw = pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0))
    finally:
        pynvml.nvmlShutdown()
    assert mw == pytest.approx(1000 * tl.at(0, "power_w", t), abs=1)
    assert abs(1000 * tl.mean(0, "power_w", t - 1, t) - 1000 * tl.at(0, "power_w", t)) > 10_000


def test_energy_is_the_integral_of_power(nvml_ramp):
    tl = nvml_ramp.timeline
    h = pynvml.nvmlDeviceGetHandleByIndex(1)
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    nvml_ramp.at(4.0)
    e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    assert (e1 - e0) / 1000 == pytest.approx(tl.mean(1, "power_w", 0.0, 4.0) * 4.0, rel=1e-4)


def test_utilization_is_the_last_completed_sixth_of_a_second(nvml_ramp):
    tl = nvml_ramp.timeline
    nvml_ramp.at(2.25)  # periods end at k/6 s: the last completed one is [2.0, 2.1667)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    assert util.gpu == round(100 * tl.mean(0, "kernel_busy", 2.0, 2.0 + 1 / 6))


def test_gpm_is_the_mean_between_samples_and_refuses_close_ones(nvml_ramp):
    tl = nvml_ramp.timeline
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 1
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    nvml_ramp.at(1.0)
    pynvml.nvmlGpmSampleGet(h, s1)
    nvml_ramp.at(1.05)
    pynvml.nvmlGpmSampleGet(h, s2)
    req = pynvml.c_nvmlGpmMetricsGet_t()
    req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = 3
    req.sample1, req.sample2 = s1, s2
    for i, mid in enumerate((2, 21, 7)):
        req.metrics[i].metricId = mid
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmMetricsGet(req)
    nvml_ramp.at(1.5)
    pynvml.nvmlGpmSampleGet(h, s2)
    pynvml.nvmlGpmMetricsGet(req)
    assert req.metrics[0].value == pytest.approx(100 * tl.mean(0, "sm_active", 1.0, 1.5), rel=1e-6)
    rx_mib = tl.mean(0, "pcie_rx_bytes_per_s", 1.0, 1.5) / 2**20
    assert req.metrics[1].value == pytest.approx(rx_mib, rel=1e-6)
    assert req.metrics[2].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    pynvml.nvmlGpmSampleFree(s1)
    pynvml.nvmlGpmSampleFree(s2)


def test_sample_buffers_resume_from_the_last_timestamp(nvml_ramp):
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    nvml_ramp.at(1.05)
    _, first = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    assert len(first) == 10  # 100 ms driver period
    last = first[-1].timeStamp
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_TOTAL_POWER_SAMPLES, last)
    nvml_ramp.at(1.31)
    _, more = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_TOTAL_POWER_SAMPLES, last)
    assert [s.timeStamp - last for s in more] == [100_000, 200_000, 300_000]


def test_processes_and_p2p(fake_nvml):
    fake_nvml(ramp(2), procs="0:4242:2048,0:4243,1:5000", nvlink=1)
    pynvml.nvmlInit()
    try:
        h0, h1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h0)
        assert [(p.pid, p.usedGpuMemory) for p in procs] == [(4242, 2048 << 20), (4243, 1 << 30)]
        assert pynvml.nvmlDeviceGetP2PStatus(h0, h1, pynvml.NVML_P2P_CAPS_INDEX_NVLINK) == 0
        assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h0, h1) == 50
    finally:
        pynvml.nvmlShutdown()


def test_no_timeline_means_no_driver(fake_nvml_lib, monkeypatch):
    monkeypatch.delenv("BUBBLEWATCH_FAKE_NVML_TIMELINE", raising=False)
    fake_nvml_lib.reset()
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()


def test_memory_info_v1_and_v2_layouts_through_real_pynvml(fake_nvml):
    fake_nvml(ramp(2), procs="0:100:30000,0:101:2000")  # 32000 MiB held on GPU 0, none on 1
    pynvml.nvmlInit()
    try:
        h0, h1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
        v2 = pynvml.nvmlDeviceGetMemoryInfo(h0, version=pynvml.nvmlMemory_v2)
        assert v2.used == 32000 << 20
        assert v2.reserved > 0 and v2.total == v2.reserved + v2.free + v2.used
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h0)
        assert v1.total == v2.total and v1.used == v2.used + v2.reserved  # v1 counts the reserve
        assert v1.total == v1.free + v1.used
        empty = pynvml.nvmlDeviceGetMemoryInfo(h1, version=pynvml.nvmlMemory_v2)
        assert empty.used == 0 and empty.free == empty.total - empty.reserved
        with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
            pynvml.nvmlDeviceGetMemoryInfo(h0, version=0x01000028)
    finally:
        pynvml.nvmlShutdown()
