"""Prometheus history as a source: against a real Prometheus, and through a fake transport."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from bubblewatch.model import Metric
from bubblewatch.sources.prometheus_history import (
    PrometheusError,
    load_prometheus,
    normalize_selector,
    parse_time,
    redact_url,
)

from .promserver import PROMETHEUS, PROMTOOL, Family, openmetrics, prometheus_with

HOSTS = ("node-a", "node-b")
GPUS_PER_HOST = 4
SECONDS = 120
# Recent enough for the TSDB, fixed within the run.
T0 = float(int(__import__("time").time()) - 3600)
MODEL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def _truth() -> dict[str, np.ndarray]:
    """A serialized PP8 over two hosts: one stage busy at a time, in turn, 1 s each."""
    g = np.arange(len(HOSTS) * GPUS_PER_HOST)[:, None]
    k = np.arange(SECONDS)[None, :]
    busy = (k % 8) == g
    return {
        "DCGM_FI_PROF_SM_ACTIVE": np.where(busy, 0.82, 0.02),
        "DCGM_FI_DEV_GPU_UTIL": np.full(busy.shape, 97.0),  # NCCL spin keeps it high
        "DCGM_FI_DEV_POWER_USAGE": np.where(busy, 420.0, 150.0) + g,
        "DCGM_FI_DEV_SM_CLOCK": 2400.0 - 10 * g + 0 * k,
        "DCGM_FI_DEV_GPU_TEMP": 45.0 + g + 0 * k,
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": np.where(busy & (g == 5), 4.0, 0.0),
    }


def _sglang_families() -> list[Family]:
    """One SGLang TP2 x PP2 replica: per-micro-batch running gauges that differ by pp_rank
    (3 and 5 requests), the same on both tp ranks; 2 queued on every rank."""
    running, queued = [], []
    for tp in range(2):
        for pp in range(2):
            labels = {"tp_rank": str(tp), "pp_rank": str(pp), "model_name": "m",
                      "instance": "node-a:30000", "job": "sglang"}  # fmt: skip
            for k in range(SECONDS):
                running.append((labels, 3.0 if pp == 0 else 5.0, T0 + k + 0.5))
                queued.append((labels, 2.0, T0 + k + 0.5))
    return [
        Family("sglang:num_running_reqs", "running requests", running),
        Family("sglang:num_queue_reqs", "queued requests", queued),
    ]


def _dcgm_text() -> str:
    fams = _sglang_families()
    for name, arr in _truth().items():
        samples = []
        for gi in range(arr.shape[0]):
            host, local = HOSTS[gi // GPUS_PER_HOST], gi % GPUS_PER_HOST
            labels = {
                "gpu": str(local),
                "UUID": f"GPU-{host}-{local:04d}",
                "device": f"nvidia{local}",
                "modelName": MODEL,
                "Hostname": host,
                "DCGM_FI_DRIVER_VERSION": "575.57.08",
                "instance": f"{host}:9400",
                "job": "dcgm",
            }
            # Scrapes land half a second after the query steps, as they do in life.
            samples.extend((labels, float(arr[gi, k]), T0 + k + 0.5) for k in range(arr.shape[1]))
        fams.append(Family(name, f"dcgm field {name}", samples))
    return openmetrics(fams)


needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="prometheus/promtool not installed (Debian package 'prometheus')",
)


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory):
    if PROMETHEUS is None or PROMTOOL is None:
        pytest.skip("prometheus/promtool not installed (Debian package 'prometheus')")
    with prometheus_with(_dcgm_text(), tmp_path_factory.mktemp("prom")) as url:
        yield url


@needs_prometheus
def test_dcgm_history_matches_what_was_written(prom_url):
    rec = load_prometheus(prom_url, T0 + 1, T0 + SECONDS - 1, 1.0)
    meta = rec.meta["prometheus"]
    assert meta["dialect"] == "dcgm"
    assert rec.gpu_indices == tuple(range(8))
    assert [g.host for g in rec.gpus] == ["node-a"] * 4 + ["node-b"] * 4
    assert rec.gpus[5].uuid == "GPU-node-b-0001" and rec.gpus[5].name == MODEL
    truth = _truth()
    want = {
        Metric.SM_ACTIVE_RATIO: truth["DCGM_FI_PROF_SM_ACTIVE"],
        Metric.KERNEL_BUSY_RATIO: truth["DCGM_FI_DEV_GPU_UTIL"] / 100.0,
        Metric.POWER_AVG_W: truth["DCGM_FI_DEV_POWER_USAGE"],
        Metric.SM_CLOCK_MHZ: truth["DCGM_FI_DEV_SM_CLOCK"],
        Metric.TEMPERATURE_C: truth["DCGM_FI_DEV_GPU_TEMP"],
        Metric.CLOCKS_EVENT_REASONS: truth["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"],
    }
    for g in range(8):
        s = rec.series[g]
        assert s.t_s[0] == T0 + 1 and len(s) == SECONDS - 1
        # Grid point t holds the scrape at t - 0.5 s: truth index t - T0 - 1.
        for metric, arr in want.items():
            np.testing.assert_allclose(s.values[metric], arr[g, : SECONDS - 1], err_msg=str(metric))
    assert rec.meta["prometheus"]["series"]["kernel_busy_ratio"] == "DCGM_FI_DEV_GPU_UTIL"


@needs_prometheus
def test_sglang_load_is_one_replicas_ranks_not_their_sum(prom_url):
    """As the live reader combines them: the maximum over tp/pp ranks (not 4 copies summed),
    and with several pipeline ranks the gauge is one micro-batch's size."""
    rec = load_prometheus(prom_url, T0 + 1, T0 + 60, 1.0, load_selector='job="sglang"')
    assert rec.meta["prometheus"]["load"] == "sglang"
    assert len(rec.load) == 60
    np.testing.assert_array_equal(rec.load.running, 5.0)  # summed, it read 16
    np.testing.assert_array_equal(rec.load.queued, 2.0)  # summed, it read 8
    assert rec.load.micro_batch is not None
    np.testing.assert_array_equal(rec.load.micro_batch, 5.0)


@needs_prometheus
def test_analyze_reads_the_engine_load_with_load_selector(prom_url, capsys):
    from bubblewatch.cli.main import main

    argv = ["analyze", "--prometheus", prom_url, "--start", str(T0 + 1), "--end", str(T0 + 60),
            "--step", "1", "--json"]  # fmt: skip
    assert main([*argv, "--load-selector", 'job="sglang"']) == 0
    ev = json.loads(capsys.readouterr().out)["evidence"]
    assert ev["micro_batch_requests"] == pytest.approx(5.0)
    assert ev["queued_requests"] == pytest.approx(2.0)
    assert main(argv) == 0  # without it, no load
    assert json.loads(capsys.readouterr().out)["evidence"]["queued_requests"] is None


@needs_prometheus
def test_analyze_gpu_model_applies_to_prometheus_history(prom_url, capsys):
    """--gpu-model reaches history too: dcgm-exporter's modelName names the GPUs, so the
    recorded model wins and the other one given is warned about once."""
    from bubblewatch.cli.main import main

    argv = ["analyze", "--prometheus", prom_url, "--start", str(T0 + 1), "--end", str(T0 + 60),
            "--step", "1", "--json"]  # fmt: skip
    assert main([*argv, "--gpu-model", "NVIDIA A100-SXM4-80GB"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["evidence"]["gpu_model_from"] == "recording"
    assert out.err.count(f"the recording names them {MODEL!r}") == 1


@needs_prometheus
def test_step_coarser_than_scrapes_averages(prom_url):
    rec = load_prometheus(prom_url, T0 + 8, T0 + 8 * 14, 8.0, selector='Hostname="node-a"')
    assert rec.gpu_indices == (0, 1, 2, 3)
    # Each 8 s window holds one busy second of each stage: mean (0.82 + 7 * 0.02) / 8.
    sm = rec.series[2].values[Metric.SM_ACTIVE_RATIO]
    np.testing.assert_allclose(sm, (0.82 + 7 * 0.02) / 8, rtol=1e-9)


@needs_prometheus
def test_real_server_read_in_small_concurrent_pieces_gives_the_same(prom_url):
    from bubblewatch.sources.prometheus_history.fetch import FetchLimits

    whole = load_prometheus(prom_url, T0 + 1, T0 + SECONDS - 1, 1.0)
    done: list[tuple[int, int]] = []
    cut = load_prometheus(
        prom_url,
        T0 + 1,
        T0 + SECONDS - 1,
        1.0,
        limits=FetchLimits(points_per_query=100, points_per_series=25, concurrency=3),
        on_progress=lambda d, n: done.append((d, n)),
    )
    # 119 points per series in pieces of 25 (5 pieces), 4 GPUs per query (2 hosts): 10 per series.
    assert cut.meta["prometheus"]["queries"] == 6 * 10
    assert done[-1] == (60, 60)
    assert cut.gpu_indices == whole.gpu_indices == tuple(range(8))
    for g in whole.gpu_indices:
        np.testing.assert_array_equal(cut.series[g].t_s, whole.series[g].t_s)
        for m, v in whole.series[g].values.items():
            np.testing.assert_array_equal(cut.series[g].values[m], v, err_msg=str(m))


@needs_prometheus
def test_real_server_errors(prom_url):
    with pytest.raises(PrometheusError, match="no GPU series matching"):
        load_prometheus(prom_url, T0, T0 + 60, 1.0, selector='Hostname="nowhere"')
    with pytest.raises(PrometheusError, match=r"HTTP 400.*parse error"):
        load_prometheus(prom_url, T0, T0 + 60, 1.0, selector='Hostname=~"(unclosed"x')
    with pytest.raises(PrometheusError, match="unknown dialect"):
        load_prometheus(prom_url, T0, T0 + 60, 1.0, dialect="datadog")


def test_unreachable_server_is_a_clear_error():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PrometheusError, match="cannot reach the server") as e:
        load_prometheus(f"http://u:secret@127.0.0.1:{port}", 0, 60, 1.0, timeout_s=2)
    assert "secret" not in str(e.value)
    assert f"http://127.0.0.1:{port}" in str(e.value)


# -- fake transport -----------------------------------------------------------------


class FakeProm:
    """Answers query_range from a dict of series name -> list of (labels, values)."""

    def __init__(self, series, *, step=1.0):
        self.series = series
        self.requests: list[urllib.request.Request] = []
        self.step = step

    def __call__(self, req: urllib.request.Request, timeout: float) -> bytes:
        self.requests.append(req)
        url = urllib.parse.urlsplit(req.full_url)
        q = urllib.parse.parse_qs(url.query)
        if url.path.endswith("/api/v1/series"):
            names = {m.split("{", 1)[0] for m in q["match[]"]}
            sets = [
                {"__name__": name, **labels}
                for name, items in self.series.items()
                if name in names
                for labels, _ in items
            ]
            return json.dumps({"status": "success", "data": sets}).encode()
        query = q["query"][0]
        start, end = float(q["start"][0]), float(q["end"][0])
        result = []
        for name, items in self.series.items():
            if (
                query == name
                or query.startswith((f"{name}{{", f"avg_over_time({name}{{"))
                or f"({name}{{" in query  # inside sum(...) or sum(max without (...) (...))
            ):
                for labels, values in items:
                    pts = [
                        [start + i * self.step, str(v)]
                        for i, v in enumerate(values)
                        if start + i * self.step <= end and v is not None
                    ]
                    result.append({"metric": labels, "values": pts})
        return json.dumps(
            {"status": "success", "data": {"resultType": "matrix", "result": result}}
        ).encode()


def test_nvidia_gpu_exporter_dialect_without_gpu_index():
    fake = FakeProm(
        {
            "nvidia_smi_power_draw_watts": [
                ({"uuid": "GPU-b", "name": "NVIDIA H100", "instance": "h:9835"}, [300, 310]),
                ({"uuid": "GPU-a", "name": "NVIDIA H100", "instance": "h:9835"}, [200, 210]),
            ],
            "nvidia_smi_utilization_gpu_ratio": [
                ({"uuid": "GPU-a", "name": "NVIDIA H100", "instance": "h:9835"}, [0.5, None]),
            ],
            "nvidia_smi_clocks_current_sm_clock_hz": [
                ({"uuid": "GPU-a", "name": "NVIDIA H100", "instance": "h:9835"}, [1.98e9, 1.98e9]),
            ],
        }
    )
    rec = load_prometheus("http://prom:9090", 100, 101, 1.0, transport=fake)
    assert rec.meta["prometheus"]["dialect"] == "nvidia_gpu_exporter"
    # No index label: GPUs are numbered by UUID.
    assert [g.uuid for g in rec.gpus] == ["GPU-a", "GPU-b"]
    a = rec.series[0]
    assert a.values[Metric.POWER_AVG_W].tolist() == [200, 210]
    assert a.values[Metric.KERNEL_BUSY_RATIO][0] == 0.5 and np.isnan(
        a.values[Metric.KERNEL_BUSY_RATIO][1]
    )
    assert a.values[Metric.SM_CLOCK_MHZ].tolist() == [1980, 1980]
    assert Metric.KERNEL_BUSY_RATIO not in rec.series[1].values


def test_nvitop_names_and_units():
    labels = {"hostname": "n1", "index": "3", "devicename": "NVIDIA A100", "uuid": "GPU-3"}
    fake = FakeProm(
        {
            "gpu_power_usage_W": [(labels, [250.0])],
            "gpu_utilization_Percentage": [(labels, [40.0])],
            "gpu_pcie_tx_throughput_MiBps": [(labels, [2.0])],
        }
    )
    rec = load_prometheus("http://prom:9090", 0, 0.5, 1.0, dialect="nvitop", transport=fake)
    s = rec.series[3]
    assert rec.gpus[0].host == "n1" and rec.gpus[0].name == "NVIDIA A100"
    assert s.values[Metric.KERNEL_BUSY_RATIO].tolist() == [0.4]
    assert s.values[Metric.PCIE_TX_BYTES_PER_S].tolist() == [2.0 * 1024 * 1024]


def test_bubblewatch_series_give_topology_and_load():
    info = [
        ({"gpu": str(g), "uuid": f"GPU-{g}", "name": "X", "pipeline": "p0", "stage": str(g // 2),
          "instance": "h:9101", "pci_bus_id": ""}, [1, 1])
        for g in range(4)
    ]  # fmt: skip
    fake = FakeProm(
        {
            "bubblewatch_gpu_power_watts": [
                ({"gpu": str(g), "instance": "h:9101"}, [100.0 + g, 101.0]) for g in range(4)
            ],
            "bubblewatch_gpu_sm_clock_hertz": [
                ({"gpu": "0", "instance": "h:9101"}, [1.5e9, 1.5e9])
            ],
            "bubblewatch_gpu_info": info,
            "sglang:num_running_reqs": [({}, [8, 8])],
            "sglang:num_queue_reqs": [({}, [3, 0])],
        }
    )
    rec = load_prometheus(
        "http://prom:9090", 10, 11, 1.0, load_selector='job="sglang"', transport=fake
    )
    assert rec.meta["prometheus"]["dialect"] == "bubblewatch"
    assert rec.topology is not None and rec.topology.stages == ((0, 1), (2, 3))
    assert rec.gpus[2].uuid == "GPU-2"
    assert rec.series[0].values[Metric.SM_CLOCK_MHZ].tolist() == [1500, 1500]
    assert rec.series[1].values[Metric.POWER_INSTANT_W].tolist() == [101, 101]
    assert rec.load.running.tolist() == [8, 8] and rec.load.queued.tolist() == [3, 0]
    assert rec.meta["prometheus"]["load"] == "sglang"
    queries = [urllib.parse.unquote_plus(r.full_url) for r in fake.requests]
    ranks = "attn_cp_rank, attn_tp_rank, moe_ep_rank, pp_rank, tp_rank"
    want = f'sum(max without ({ranks}) (sglang:num_running_reqs{{job="sglang"}}))'
    assert any(want in q for q in queries)
    assert rec.load.micro_batch is None  # no pipeline ranks: the gauge counts every request


def test_token_is_sent_but_never_shown():
    def deny(req: urllib.request.Request, timeout: float) -> bytes:
        assert req.get_header("Authorization") == "Bearer s3cr3t"
        raise urllib.error.HTTPError(req.full_url, 401, "Unauthorized", {}, io.BytesIO(b""))  # type: ignore[arg-type]

    with pytest.raises(PrometheusError, match="not authorised") as e:
        load_prometheus("https://prom.example/", 0, 10, 1.0, bearer_token="s3cr3t", transport=deny)
    assert "s3cr3t" not in str(e.value)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"<html>login</html>", "not JSON"),
        (b'{"status": "error", "error": "too many samples"}', "too many samples"),
        (b'{"status": "success", "data": {"resultType": "vector", "result": []}}', "matrix"),
        (
            b'{"status": "success", "data": {"resultType": "matrix", '
            b'"result": [{"metric": {}, "values": [[1, "x"]]}]}}',
            "pairs",
        ),
    ],
)
def test_bad_answers(body, match):
    # The series lookup answers well (one GPU); the range query gives the bad answer.
    series = b'{"status":"success","data":[{"__name__":"DCGM_FI_DEV_POWER_USAGE","gpu":"0"}]}'

    def transport(req: urllib.request.Request, timeout: float) -> bytes:
        return series if "/api/v1/series" in req.full_url else body

    with pytest.raises(PrometheusError, match=match):
        load_prometheus("http://prom:9090", 0, 10, 1.0, dialect="dcgm", transport=transport)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"<html>login</html>", "not JSON"),
        (b'{"status": "success", "data": {"a": 1}}', "other than a list of label sets"),
    ],
)
def test_bad_series_answers(body, match):
    with pytest.raises(PrometheusError, match=match):
        load_prometheus("http://prom:9090", 0, 10, 1.0, transport=lambda r, t: body)


def test_long_ranges_are_split_into_allowed_chunks():
    fake = FakeProm({"DCGM_FI_DEV_POWER_USAGE": [({"gpu": "0", "Hostname": "h"}, [1.0] * 10_000)]})
    rec = load_prometheus("http://prom:9090", 0, 25_000, 1.0, dialect="dcgm", transport=fake)
    starts = sorted(
        float(urllib.parse.parse_qs(urllib.parse.urlsplit(r.full_url).query)["start"][0])
        for r in fake.requests
        if "(DCGM_FI_DEV_POWER_USAGE{" in urllib.parse.unquote_plus(r.full_url)
    )
    assert starts == [0.0, 10_000.0, 20_000.0]
    assert len(rec.series[0]) == 25_001


def test_times_selectors_and_urls():
    now = 1_700_000_000.0
    assert parse_time("-1h", now) == now - 3600
    assert parse_time("now-30m", now) == now - 1800
    assert parse_time("now", now) == now
    assert parse_time("1700000000.5", now) == 1_700_000_000.5
    assert parse_time("2023-11-14T22:13:20Z", now) == 1_700_000_000.0
    assert parse_time("2023-11-14T22:13:20", now) == 1_700_000_000.0
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_time("yesterday", now)
    assert normalize_selector('{job="dcgm"}') == 'job="dcgm"'
    with pytest.raises(ValueError, match="label matchers"):
        normalize_selector("up{job='x'}")
    assert redact_url("https://user:pw@prom:9090/sub?x=1") == "https://prom:9090/sub"
    with pytest.raises(PrometheusError, match="http"):
        load_prometheus("ftp://prom", 0, 1, 1.0)
    with pytest.raises(PrometheusError, match="after start"):
        load_prometheus("http://prom", 10, 1, 1.0)


def test_fixture_file_path_is_unused(tmp_path: Path):
    # The OpenMetrics writer groups each family and orders samples by time.
    text = openmetrics([Family("m", "h", [({"a": "1"}, 2.0, 5.0), ({"a": "1"}, 1.0, 4.0)])])
    assert text.splitlines()[2:4] == ['m{a="1"} 1 4.000', 'm{a="1"} 2 5.000']
    assert text.endswith("# EOF\n")


def test_one_hosts_run_of_stages_is_its_part_of_the_pipeline():
    """Regression: a host holding stages 4-7 of a PP8 got no topology from
    bubblewatch_gpu_info (stages had to start at 0), so its GPUs were guessed."""
    import numpy as np

    from bubblewatch.sources.prometheus_history.dialects import dialects
    from bubblewatch.sources.prometheus_history.grid_columns import (
        gpu_key,
        identity,
        topology_from_info,
    )
    from bubblewatch.sources.prometheus_history.matrix import RangeSeries

    d = dialects()["bubblewatch"]

    def info(gpu: int, stage: int) -> RangeSeries:
        labels = {"instance": "b:9842", "gpu": str(gpu), "pipeline": "p", "stage": str(stage)}
        return RangeSeries(labels, np.zeros(1), np.ones(1))

    series = [info(g, 4 + g) for g in range(4)]
    index = {identity(gpu_key(d, s.labels)): k for k, s in enumerate(series)}
    topo = topology_from_info(d, series, index)
    assert topo is not None and topo.stages == ((0,), (1,), (2,), (3,))
    assert "stages 4-7" in topo.source
    # A gap in the run is not one host's part of a pipeline.
    gapped = [info(0, 4), info(1, 6)]
    index = {identity(gpu_key(d, s.labels)): k for k, s in enumerate(gapped)}
    assert topology_from_info(d, gapped, index) is None
