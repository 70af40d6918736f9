"""The daemon's whole loop in this process, on a fake clock and a fake source.

Windows close, verdicts reach the exporter, SIGHUP reloads and a GPU is lost
at fake instants: each test covers tens of seconds of the daemon's time in
a few real ones, and sees the same ticks on every run. Real signals, sd_notify
and the process around it are the subprocess tests' (test_run_*.py).
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostile._http import HangingReceiver
from prometheus_client import generate_latest

from bubblewatch.daemon.loop.run import Daemon
from bubblewatch.daemon.loop.state import SHUTDOWN_ALERT_TIMEOUT_S
from bubblewatch.model.metrics import Metric
from bubblewatch.sources.trace import read_trace

from ._proc import rule_file, write_config
from .fakes import WALL0, FakeClock, FakeSource, Readings, busy, idle

PIPELINE = "testhost/sglang:30000"
P = 4
TURN_S = 0.4  # each stage computes in turn for 0.4 s: one micro-batch in flight


def serialized(gpu: int, t_s: float) -> Mapping[Metric, float]:
    turn = int((t_s - WALL0) / TURN_S + 1e-6) % P
    return busy(gpu, t_s) if turn == gpu else idle(gpu, t_s)


def scrape(d: Daemon) -> dict[str, float]:
    """The exporter's text as a scrape gets it, parsed as the subprocess tests parse it."""
    out: dict[str, float] = {}
    for line in generate_latest(d.server.registry).decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def verdict(m: dict[str, float]) -> str | None:
    on = [
        k.split('verdict="')[1].split('"')[0]
        for k, v in m.items()
        if k.startswith("bubblewatch_pipeline_verdict{") and PIPELINE in k and v == 1.0
    ]
    return on[0] if len(on) == 1 else None


def start(
    tmp_path: Path, readings: Readings, *, n_gpus: int = P, **sections: Any
) -> tuple[Daemon, FakeClock, FakeSource, Path]:
    """A daemon on the test config (200 ms sampling, 1 s analysis, 10.5 s window), not yet run."""
    cfg = write_config(tmp_path / "bubblewatch.yml", simulate=None, **sections)
    clock = FakeClock()
    source = FakeSource(clock, n_gpus=n_gpus, readings=readings)
    d = Daemon.open(cfg, env={}, clock=clock, source=source)
    assert d is not None
    return d, clock, source, cfg


def run_until(d: Daemon, clock: FakeClock, stop_s: float) -> float:
    """Run the daemon until SIGTERM at fake `stop_s`; the real seconds it took."""
    clock.at(stop_s, signum=signal.SIGTERM)
    t0 = time.monotonic()
    assert d.run() == 0
    return time.monotonic() - t0


def every(clock: FakeClock, times: list[float], look: Callable[[], Any]) -> list[Any]:
    seen: list[Any] = []
    for t in times:
        clock.at(t, action=lambda: seen.append(look()))
    return seen


def test_a_window_closes_and_its_verdict_is_published(tmp_path: Path) -> None:
    handlers = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
    d, clock, source, _ = start(tmp_path, serialized)
    seen = every(clock, [5.0, 10.0, 12.0, 20.0], lambda: verdict(scrape(d)))
    real_s = run_until(d, clock, 21.0)
    # Run in this process, the daemon gives the signals back as it found them.
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    # Before the 10.5 s window has filled there is too little to judge; then it is judged.
    assert seen == ["insufficient_data", "insufficient_data", "serialized", "serialized"]
    # Every 200 ms deadline polled once (t = 0, 0.2, ..., 21.0), in fake time: no drift.
    assert len(source.polls) == 106
    assert source.polls[:3] == [0.0, 0.2, 0.4] and source.polls[-1] == pytest.approx(21.0)
    assert real_s < 21.0, "fake time must not wait for real time"
    assert source.closed


def test_a_reload_puts_the_new_interval_in_force_and_a_bad_one_keeps_it(tmp_path: Path) -> None:
    d, clock, source, cfg = start(tmp_path, busy)
    text = cfg.read_text()

    def rewrite(**changes: Any) -> None:
        data = yaml.safe_load(text)
        for section, values in changes.items():
            data[section] = {**data[section], **values}
        cfg.write_text(yaml.safe_dump(data))

    reloads = "bubblewatch_config_last_reload_successful"
    clock.at(5.1, action=lambda: rewrite(sampling={"interval": "500ms"}))
    clock.at(5.1, signum=signal.SIGHUP)
    clock.at(10.1, action=lambda: cfg.write_text("sampling: [not, a, mapping]\n"))
    clock.at(10.1, signum=signal.SIGHUP)
    looks = every(clock, [5.0, 10.0, 15.0], lambda: (scrape(d).get(reloads), source.interval))
    run_until(d, clock, 15.0)
    assert looks == [(1.0, 0.2), (1.0, 0.5), (0.0, 0.5)]
    # Polls every 200 ms up to the reload; the one already scheduled (5.2), then every 500 ms.
    before = [p for p in source.polls if p < 5.2]
    after = [p for p in source.polls if p >= 5.2]
    assert before == pytest.approx([0.2 * k for k in range(26)])
    assert after == pytest.approx([5.2 + 0.5 * k for k in range(20)])
    assert verdict(scrape(d)) == "healthy"


def test_a_lost_gpu_leaves_the_loop_running_and_is_recorded(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    d, clock, source, _ = start(tmp_path, busy, n_gpus=2, record={"path": str(trace)})
    clock.at(13.1, action=lambda: source.lose(1))
    seen = every(clock, [12.0, 30.0], lambda: verdict(scrape(d)))
    polled: list[int] = []
    clock.at(30.0, action=lambda: polled.append(d.sampler.stats().polls))
    run_until(d, clock, 30.0)
    # Healthy while both GPUs sample; once GPU 1's samples leave the window, too little to judge.
    assert seen == ["healthy", "insufficient_data"]
    assert polled == [151] and d.sampler.stats().errors == 0
    rec = read_trace(trace)
    (lost,) = [e for e in rec.events if e.kind == "gpu_lost"]
    assert (lost.gpu, lost.t_s) == (1, WALL0 + 13.1)
    assert rec.series[0].t_s[-1] == pytest.approx(WALL0 + 30.0)
    assert rec.series[1].t_s[-1] == pytest.approx(WALL0 + 13.0)  # its last poll


def test_a_stalled_receiver_does_not_hold_the_stop(tmp_path: Path) -> None:
    """A receiver that takes the request and never answers: SIGTERM aborts the request and
    ends the daemon at once (it took SHUTDOWN_ALERT_TIMEOUT_S, the request left running in a
    detached thread), the alert kept in the spool for the next start."""
    receiver = HangingReceiver()
    rules = rule_file(tmp_path / "always.rules.yaml", ["Always"])
    d, clock, _, _ = start(
        tmp_path,
        busy,
        rules={"files": [str(rules)]},
        alerting={"timeout": "5m", "receivers": [{"name": "hook", "url": receiver.url}]},
    )
    stopping: list[float] = []

    def in_flight() -> None:  # the first full window (10.5 s) queued the alert; it is stuck
        assert receiver.asked.wait(10.0), "the alert was never sent"
        stopping.append(time.monotonic())

    clock.at(13.0, action=in_flight)
    try:
        run_until(d, clock, 13.0)
        stop_s = time.monotonic() - stopping[0]
    finally:
        receiver.close()
    assert stop_s < SHUTDOWN_ALERT_TIMEOUT_S / 2, stop_s  # real time; the receiver's is 5 min
    with contextlib.closing(sqlite3.connect(tmp_path / "state" / "alerts-hook.sqlite3")) as db:
        assert db.execute("SELECT count(*) FROM items").fetchone() == (1,)  # for the next start
