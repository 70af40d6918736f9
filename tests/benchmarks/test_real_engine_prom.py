"""The real-engine run's Prometheus-history check without vLLM: the stand-in exporter, the
scrape config, and the whole check with a real Prometheus scraping a fake engine."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .test_real_engine import HERE, _load

sys.path.insert(0, str(HERE))  # the script's own `import standin, client`
try:
    prom_history = _load("prom_history")
    prom_server = _load("prom_server")
finally:
    sys.path.remove(str(HERE))
client = sys.modules["client"]

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool not installed (Debian package 'prometheus')",
)


def _cpu(rates: dict[int, float], sys_rate: float = 0.05) -> Callable[[int], tuple[float, float]]:
    """Fake CPU times for pid = rank: user at `rates[rank]` s/s plus a slow 5 s wave."""

    def read(pid: int) -> tuple[float, float]:
        t = time.monotonic()
        wave = 0.05 * math.sin(2 * math.pi * t / 5.0) * 5.0 / (2 * math.pi)
        return rates[pid] * t + (wave if pid == 0 else -wave), sys_rate * t

    return read


def test_exposition_is_dcgm_exporters_names_and_labels():
    text = prom_server.exposition({0: (4242, 0.25, 0.9), 1: (4343, 0.5, 1.0)}, "host1")
    assert (
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="STANDIN-CPU-rank0-pid4242",'
        'modelName="CPU worker, pipeline rank 0 (stand-in)",Hostname="host1"} 0.250000'
    ) in text
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="STANDIN-CPU-rank1-pid4343",' in text
    assert text.rstrip().endswith("100.0000")  # percent, as dcgm-exporter serves it


def test_the_exporter_serves_each_interval_since_the_last_scrape():
    now = [10.0]
    cpu = {7: (1.0, 0.5)}
    ex = prom_server.StandinExporter(
        {0: 7}, spin={0: 2.0}, read_cpu=lambda pid: cpu[pid], clock=lambda: now[0]
    )
    assert "DCGM_FI_PROF_SM_ACTIVE{" not in ex.scrape()  # no interval yet: absent, not zero
    now[0], cpu[7] = 11.0, (1.6, 0.6)  # 0.6 s user, 0.1 s system, 2 user s per system s spin
    text = ex.scrape()
    assert "} 0.400000" in text  # (0.6 - 2 * 0.1) / 1 s
    assert "} 70.0000" in text  # (0.6 + 0.1) / 1 s, in percent


@needs_prometheus
def test_the_scrape_config_is_one_that_promtool_accepts(tmp_path):
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(prom_server.prometheus_config({"standin": "127.0.0.1:1", "engine": "x:2"}))
    proc = subprocess.run(
        ["promtool", "check", "config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "scrape_interval: 1s" in cfg.read_text()


class _FakeEngine:
    """vLLM's two load gauges on /metrics, as a function of the time."""

    def __init__(self, counts: Callable[[float], tuple[int, int]]) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                r, w = fake.counts(time.time())
                body = (
                    "# TYPE vllm:num_requests_running gauge\n"
                    f'vllm:num_requests_running{{engine="0",model_name="m"}} {r}\n'
                    "# TYPE vllm:num_requests_waiting gauge\n"
                    f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {w}\n'
                ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.counts = counts
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _load_fn(read: Callable[[int], tuple[float, float]], counts, concurrency: int = 4):
    """The caller's load: the client's 0.2 s samples of the same (fake) world."""

    def load(duration_s: float):
        res = client.LoadResult(concurrency, 0.0, 0, [], [])
        res.t0 = time.monotonic()
        while time.monotonic() < res.t0 + duration_s:
            now = time.monotonic()
            for rank in (0, 1):
                res.cpu.setdefault(rank, []).append((now, *read(rank)))
            r, w = counts(time.time())
            res.counts.append((now, now, concurrency, concurrency, float(r), float(w)))
            time.sleep(0.2)
        res.t1 = time.monotonic()
        res.duration_s = res.t1 - res.t0
        return res

    return load


ARGV = [
    "python",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "/m",
    "--pipeline-parallel-size",
    "2",
]


def _run(tmp_path, *, exported, seen, counts):
    with _FakeEngine(counts) as url:
        return prom_history.check_prometheus_history(
            url,
            {0: 0, 1: 1},
            12.0,
            tmp_path,
            load=_load_fn(_cpu(seen), counts),
            argv=ARGV,
            bubble_tolerance=0.15,
            read_cpu=_cpu(exported),
        )


def _counts(t: float) -> tuple[int, int]:
    return 1 + int(t) % 4, int(t) % 2


@pytest.mark.slow
@needs_prometheus
def test_the_history_agrees_with_the_scrapes_and_the_direct_trace(tmp_path):
    got = _run(tmp_path, exported={0: 0.35, 1: 0.3}, seen={0: 0.35, 1: 0.3}, counts=_counts)
    failed = [what for ok, what in got if not ok]
    assert not failed, got
    assert len(got) == 7
    assert (tmp_path / "prom-history" / "analyze-history-c4.json").exists()


@pytest.mark.slow
@needs_prometheus
def test_an_exporter_that_disagrees_and_an_idle_engine_fail_their_checks(tmp_path):
    # The exporter serves ranks far busier than the client saw, and the engine says 0.
    got = _run(tmp_path, exported={0: 0.9, 1: 0.9}, seen={0: 0.2, 1: 0.15}, counts=lambda t: (0, 0))
    failed = [what for ok, what in got if not ok]
    assert len(failed) == 2, got
    assert "scraped running + waiting" in failed[0] and "max 0" in failed[0]
    assert "bubble" in failed[1] and "direct stand-in trace" in failed[1]
