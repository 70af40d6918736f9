"""Logging: logfmt/JSON, no timestamps under journald, rate-limited repeats."""

from __future__ import annotations

import io
import json
import logging
import os
import tempfile

import pytest

from bubblewatch.daemon.logging import RateLimitFilter, configure_logging


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_logfmt_has_timestamps_and_quotes_values() -> None:
    buf = io.StringIO()
    configure_logging("info", "logfmt", stream=buf, env={})
    logging.getLogger("bubblewatch.x").warning(
        "delivery failed", extra={"kv": {"receiver": "ops", "error": 'HTTP 500 "oops"'}}
    )
    logging.getLogger("bubblewatch.x").debug("hidden")
    line = buf.getvalue().strip()
    assert line.startswith("ts=")
    assert (
        'level=warning logger=bubblewatch.x msg="delivery failed" receiver=ops '
        'error="HTTP 500 \\"oops\\""' in line
    )
    assert "hidden" not in buf.getvalue()


def test_json_lines() -> None:
    buf = io.StringIO()
    configure_logging("debug", "json", stream=buf, env={})
    logging.getLogger("bubblewatch.y").info("sampled", extra={"kv": {"gpus": 8}})
    d = json.loads(buf.getvalue())
    assert d["level"] == "info" and d["msg"] == "sampled" and d["gpus"] == 8 and "ts" in d


def test_journald_stream_drops_timestamps_and_adds_priority() -> None:
    with tempfile.TemporaryFile("w+") as f:
        st = os.fstat(f.fileno())
        configure_logging(
            "info", "logfmt", stream=f, env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        )
        logging.getLogger("bubblewatch.z").error("boom")
        f.seek(0)
        line = f.read().strip()
    assert line == "<3>level=error logger=bubblewatch.z msg=boom"


def test_journal_stream_for_another_fd_is_ignored() -> None:
    with tempfile.TemporaryFile("w+") as f:
        configure_logging("info", "logfmt", stream=f, env={"JOURNAL_STREAM": "1:2"})
        logging.getLogger("bubblewatch.z").info("x")
        f.seek(0)
        assert f.read().startswith("ts=")


def test_rate_limit_once_per_interval_per_key_and_counts_suppressed() -> None:
    clock = FakeClock()
    buf = io.StringIO()
    handler = configure_logging("info", "logfmt", stream=buf, env={})
    handler.filters.clear()
    handler.addFilter(RateLimitFilter(60.0, clock=clock))
    log = logging.getLogger("bubblewatch.nvml")
    for _ in range(100):  # 100 ticks of the same failure
        log.warning(
            "nvml call failed",
            extra={"kv": {"call": "GetPowerUsage"}, "ratelimit_key": "nvml:GetPowerUsage:15"},
        )
        log.warning(
            "nvml call failed",
            extra={"kv": {"call": "GetTemperature"}, "ratelimit_key": "nvml:GetTemperature:3"},
        )
        clock.t += 0.5
    log.info("unlimited")
    log.info("unlimited")
    clock.t = 61.0
    log.warning(
        "nvml call failed",
        extra={"kv": {"call": "GetPowerUsage"}, "ratelimit_key": "nvml:GetPowerUsage:15"},
    )
    lines = buf.getvalue().strip().split("\n")
    assert len(lines) == 5
    assert "call=GetPowerUsage" in lines[0] and "suppressed" not in lines[0]
    assert "call=GetTemperature" in lines[1]
    assert lines[2].endswith("msg=unlimited") and lines[3].endswith("msg=unlimited")
    assert "call=GetPowerUsage suppressed=99" in lines[4]


def test_bad_level_or_format() -> None:
    with pytest.raises(ValueError, match="log level"):
        configure_logging("loud", "logfmt", stream=io.StringIO(), env={})
    with pytest.raises(ValueError, match="log format"):
        configure_logging("info", "xml", stream=io.StringIO(), env={})


def test_reconfigure_replaces_handler() -> None:
    configure_logging("info", "logfmt", stream=io.StringIO(), env={})
    configure_logging("info", "json", stream=io.StringIO(), env={})
    ours = [h for h in logging.getLogger("bubblewatch").handlers if getattr(h, "_bubblewatch", 0)]
    assert len(ours) == 1
