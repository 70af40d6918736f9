"""The engine /metrics reader against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import http.server
import shlex
import socket
import threading
import time

import pytest

from bubblewatch.sources.engine_metrics import (
    EngineLoadPoller,
    EngineMetricsReader,
    MetricsParseError,
    parse_load_figures,
)
from bubblewatch.topology.cmdline import parse_engine_cmdline
from bubblewatch.topology.endpoint import metrics_url

# As SGLang exports with --enable-metrics: one series per scheduler (PP2 x TP2 here).
SGLANG_TEXT = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="Kimi-K2",pp_rank="0",tp_rank="0"} 7.0
sglang:num_running_reqs{model_name="Kimi-K2",pp_rank="0",tp_rank="1"} 7.0
sglang:num_running_reqs{model_name="Kimi-K2",pp_rank="1",tp_rank="0"} 6.0
sglang:num_running_reqs{model_name="Kimi-K2",pp_rank="1",tp_rank="1"} 6.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="Kimi-K2",pp_rank="0",tp_rank="0"} 12.0
sglang:num_queue_reqs{model_name="Kimi-K2",pp_rank="0",tp_rank="1"} 12.0
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="Kimi-K2",pp_rank="0",tp_rank="0"} 95.6
# HELP sglang:cuda_graph_passes_total Forward passes by CUDA graph use.
# TYPE sglang:cuda_graph_passes_total counter
sglang:cuda_graph_passes_total{mode="none",pp_rank="0",tp_rank="0"} 1234.0
"""
# Two data-parallel replicas (dp_rank): summed.
SGLANG_DP_TEXT = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",pp_rank="0",tp_rank="0"} 3.0
sglang:num_running_reqs{dp_rank="1",pp_rank="0",tp_rank="0"} 5.0
"""
VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} 31.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-70B-Instruct"} 29.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} 4.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-70B-Instruct"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} 0.42
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 10.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 12.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 12.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.3
"""


def parse_load(text: str) -> tuple[float | None, float | None]:
    """Running and queued requests from the engine's answer; raises MetricsParseError if absent."""
    figures = parse_load_figures(text)
    return figures.running, figures.queued


def test_parse_sglang_takes_max_over_ranks():
    assert parse_load(SGLANG_TEXT) == (7.0, 12.0)


def test_parse_sglang_sums_data_parallel_replicas():
    assert parse_load(SGLANG_DP_TEXT) == (8.0, None)


def test_parse_vllm_sums_engines():
    assert parse_load(VLLM_TEXT) == (60.0, 4.0)


@pytest.mark.parametrize("text", ["", "hello world {{{", "# TYPE other gauge\nother 1\n"])
def test_parse_without_load_metrics_is_an_error(text):
    with pytest.raises(MetricsParseError):
        parse_load(text)


@pytest.mark.parametrize(
    ("cmd", "url"),
    [
        ("python -m sglang.launch_server --enable-metrics", "http://127.0.0.1:30000/metrics"),
        ("python -m sglang.launch_server", None),
        (
            "python -m sglang.launch_server --enable-metrics --host 0.0.0.0 --port 31000",
            "http://127.0.0.1:31000/metrics",
        ),
        ("vllm serve m", "http://127.0.0.1:8000/metrics"),
        ("vllm serve m --host :: --port 9000", "http://[::1]:9000/metrics"),
        ("vllm serve m --host fd00::5", "http://[fd00::5]:8000/metrics"),
        ("vllm serve m --host 10.1.2.3", "http://10.1.2.3:8000/metrics"),
        ("trtllm-serve m", "http://localhost:8000/metrics"),  # JSON iteration stats
        ("vllm serve m --disable-log-stats", None),
        ("vllm serve m --headless", None),
    ],
)
def test_metrics_url_from_flags(cmd, url):
    cfg = parse_engine_cmdline(shlex.split(cmd))
    assert cfg is not None
    assert metrics_url(cfg) == url


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b""
    status = 200
    stall_s = 0.0

    def do_GET(self):
        if self.stall_s:
            time.sleep(self.stall_s)
        try:
            self.send_response(self.status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(self.body)))
            self.end_headers()
            self.wfile.write(self.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader gave up (timeout, size limit): expected here

    def log_message(self, format, *args):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(body: str | bytes, *, status=200, stall_s=0.0):
        handler = type(
            "H",
            (_Handler,),
            {
                "body": body.encode() if isinstance(body, str) else body,
                "status": status,
                "stall_s": stall_s,
            },
        )
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(
            target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/metrics"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_reads_sglang_over_http(serve):
    reader = EngineMetricsReader(serve(SGLANG_TEXT), clock=lambda: 1000.0)
    reading = reader.read()
    assert reading.reason is None
    assert reading.sample is not None
    assert (reading.sample.t_s, reading.sample.running, reading.sample.queued) == (
        1000.0,
        7.0,
        12.0,
    )
    assert reader.failures == {} and reader.reads == 1


def test_reads_vllm_over_http(serve):
    reading = EngineMetricsReader(serve(VLLM_TEXT)).read()
    assert reading.sample is not None
    assert (reading.sample.running, reading.sample.queued) == (60.0, 4.0)


def test_stalled_server_times_out_within_the_limit(serve):
    reader = EngineMetricsReader(serve(VLLM_TEXT, stall_s=3.0), timeout_s=0.2)
    t0 = time.monotonic()
    reading = reader.read()
    elapsed = time.monotonic() - t0
    assert reading.sample is None
    assert reading.reason is not None and "timed out" in reading.reason
    assert elapsed < 1.0
    assert reader.failures == {"timeout": 1}


def test_garbage_is_a_parse_failure(serve):
    reader = EngineMetricsReader(serve(b"\x00\xff<html>not metrics</html>"))
    reading = reader.read()
    assert reading.sample is None and reading.reason is not None
    assert reader.failures == {"parse": 1}


def test_http_error_status(serve):
    reader = EngineMetricsReader(serve("nope", status=503))
    assert reader.read().reason == "HTTP 503 Service Unavailable"
    assert reader.failures == {"http": 1}


def test_oversized_answer_is_refused(serve):
    reader = EngineMetricsReader(serve(VLLM_TEXT * 50), max_bytes=1024)
    assert reader.read().sample is None
    assert reader.failures == {"too-large": 1}


def test_nothing_listening_is_a_connection_failure():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reader = EngineMetricsReader(f"http://127.0.0.1:{port}/metrics", timeout_s=0.2)
    assert reader.read().sample is None
    assert reader.read().sample is None
    assert reader.failures == {"connection": 2}


def test_failure_is_logged_once_not_every_read(serve, caplog):
    reader = EngineMetricsReader(serve("garbage"))
    for _ in range(3):
        reader.read()
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1


def test_url_credentials_never_reach_the_log(serve, caplog):
    url = serve("garbage").replace("http://", "http://admin:pw-s3cr3t-XYZ@")
    EngineMetricsReader(url).read()
    assert caplog.records and "pw-s3cr3t-XYZ" not in caplog.text


def test_poller_delivers_samples_and_stops(serve):
    got = []
    reader = EngineMetricsReader(serve(SGLANG_TEXT))
    poller = EngineLoadPoller(reader, interval_s=0.05, on_sample=got.append).start()
    deadline = time.monotonic() + 5.0
    while len(got) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    poller.stop()
    assert not poller.running
    assert len(got) >= 3
    assert poller.latest() == got[-1]
    assert poller.last_reason is None


def test_poller_never_blocks_the_caller_on_a_stalled_server(serve):
    reader = EngineMetricsReader(serve(VLLM_TEXT, stall_s=2.0), timeout_s=0.3)
    with EngineLoadPoller(reader, interval_s=0.05) as poller:
        t0 = time.monotonic()
        assert poller.latest() is None  # returns at once while a read is stuck
        assert time.monotonic() - t0 < 0.05
        time.sleep(0.5)
        assert poller.last_reason is not None and "timed out" in poller.last_reason
    assert not poller.running


def test_poller_survives_a_failing_callback(serve, caplog):
    def boom(_sample):
        raise RuntimeError("sink down")

    reader = EngineMetricsReader(serve(VLLM_TEXT))
    with EngineLoadPoller(reader, interval_s=0.02, on_sample=boom) as poller:
        time.sleep(0.2)
        assert poller.running
    assert reader.reads >= 3
    assert caplog.text.count("engine load callback failed") == 1


def test_version_probe_asks_the_engines_own_endpoint(serve):
    """SGLang /server_info (then /get_server_info), vLLM /version; none from a headless engine."""
    from urllib.parse import urlparse

    from bubblewatch.topology.probe import probe_version

    url = urlparse(serve('{"version": "0.5.11", "tp_size": 1, "internal_states": []}'))
    sg = parse_engine_cmdline(
        shlex.split(f"python -m sglang.launch_server --pp-size 8 --port {url.port}")
    )
    assert probe_version(sg) == "0.5.11"
    vl = parse_engine_cmdline(shlex.split(f"vllm serve m --port {url.port}"))
    assert probe_version(vl) == "0.5.11"  # the test server answers every path alike
    assert probe_version(parse_engine_cmdline(shlex.split("vllm serve m --headless"))) is None
    bad = urlparse(serve("<html>no</html>", status=404))
    nope = parse_engine_cmdline(shlex.split(f"vllm serve m --port {bad.port}"))
    assert probe_version(nope) is None
