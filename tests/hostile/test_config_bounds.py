"""Every duration of the daemon's config is bounded at load, with file, line, field and range.

Pins: `alerting.timeout: 200000d` (or `initial_backoff`, `max_backoff`) was
accepted, and with a receiver answering 500 the delivery thread died on
`OverflowError: timestamp out of range for platform time_t`, the queue stuck;
`analysis.interval: 200000d` was accepted and no analysis ever ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.config.yamlsrc import ConfigError
from bubblewatch.durations import format_duration
from bubblewatch.sinks.alerts import RetryPolicy

ENV = {"STATE_DIRECTORY": "/nonexistent-state"}

# (section, key, the largest value allowed, the smallest)
BOUNDED = [
    ("sampling", "interval", "30m", "100ms"),
    ("analysis", "interval", "1h", None),
    ("topology", "rediscover_interval", "1d", None),
    ("alerting", "repeat_interval", "30d", None),
    ("alerting", "timeout", "5m", "10ms"),
    ("alerting", "initial_backoff", "1h", "1ms"),
    ("alerting", "max_backoff", "1d", "1ms"),
    ("log", "ratelimit_interval", "1d", None),
    ("record", "max_age", "365d", None),
]


def _load(tmp_path: Path, text: str) -> None:
    p = tmp_path / "bw.yml"
    p.write_text(text)
    load_config(p, env=ENV)


def _extra(section: str) -> str:
    return "  path: t.jsonl\n" if section == "record" else ""  # rotation needs a trace


@pytest.mark.parametrize(("section", "key", "high", "low"), BOUNDED)
def test_a_huge_duration_is_refused_naming_file_line_field_and_range(
    tmp_path: Path, section: str, key: str, high: str, low: str | None
) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, f"{section}:\n{_extra(section)}  {key}: 200000d\n")
    err = e.value
    line = 3 if _extra(section) else 2
    assert (err.path, err.line, err.field) == (str(tmp_path / "bw.yml"), line, f"{section}.{key}")
    assert f"at most {high}" in err.reason or f"and {high}" in err.reason, err.reason
    assert "200000d" in err.reason


@pytest.mark.parametrize(("section", "key", "high", "low"), BOUNDED)
def test_the_bounds_themselves_are_accepted(
    tmp_path: Path, section: str, key: str, high: str, low: str | None
) -> None:
    others = {  # what the largest value needs of the other keys
        ("sampling", "interval"): "  history: 1h\nanalysis:\n  window: 1h\n",
        ("alerting", "initial_backoff"): "  max_backoff: 2h\n",
    }.get((section, key), "")
    _load(tmp_path, f"{section}:\n{_extra(section)}  {key}: {high}\n{others}")
    if low is not None:
        low_others = "  initial_backoff: 1ms\n" if key == "max_backoff" else ""
        _load(tmp_path, f"{section}:\n{_extra(section)}{low_others}  {key}: {low}\n")


def test_a_timeout_below_the_minimum_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(
            tmp_path, "alerting:\n  receivers:\n    - {name: a, url: 'http://x/', timeout: 1ms}\n"
        )
    assert e.value.field == "alerting.receivers[0].timeout"
    assert "between 10ms and 5m" in e.value.reason


def test_a_command_line_duration_is_bounded_too() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(None, {"--analysis.interval": "200000d"}, env=ENV)
    assert e.value.field == "--analysis.interval" and "at most 1h" in e.value.reason


def test_the_retry_policy_refuses_what_would_overflow_a_timer() -> None:
    with pytest.raises(ValueError, match="max_backoff_s must be between"):
        RetryPolicy(max_backoff_s=200000 * 86400.0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(86400.0, "1d"), (3600.0, "1h"), (300.0, "5m"), (0.01, "10ms"), (1.5, "1.5s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("text", "field", "expect"),
    [
        # 10**20 worker threads allowed: no cap on requests answered at once
        ("web:\n  max_requests: 100000000000000000000\n", "web.max_requests", "must be 1..1024"),
        # what memory holds per receiver while the spool's disk is full
        ("alerting:\n  max_queue: 10000000000000000000000000\n", "alerting.max_queue",
         "must be 1..100000"),
        ("alerting:\n  receivers:\n    - {name: a, url: 'http://x/', max_queue: 100001}\n",
         "alerting.receivers[0].max_queue", "must be 1..100000"),
        ("record:\n  path: t.jsonl\n  max_age: 1h\n  keep: 100001\n", "record.keep",
         "must be 0..100000"),
        ("topology:\n  first_stage: 1048576\n", "topology.first_stage", "must be 0..1048575"),
    ],
    ids=["max-requests", "max-queue", "receiver-max-queue", "keep", "first-stage"],
)  # fmt: skip
def test_counts_are_bounded_too(tmp_path: Path, text: str, field: str, expect: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    assert e.value.field == field and expect in e.value.reason, str(e.value)
    assert e.value.line is not None
