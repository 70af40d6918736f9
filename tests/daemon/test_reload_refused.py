"""A reload the daemon cannot apply whole is seen: a log line per setting, metrics, STATUS.

Pins: a reload that changed `web.listen_address` (or another setting a
running daemon cannot change) logged one warning, then reported
`bubblewatch_config_last_reload_successful 1` and took the new value into the
configuration it showed as in force, though the endpoint still listened on
the old address; the next reload of the same file said nothing at all. A
malformed file was visible only as that gauge at 0, with no count of how
often reloads had failed.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .fakes import WALL0, busy
from .test_loop_in_process import every, run_until, scrape, start


class Records(logging.Handler):
    """The daemon's log records, with their key=value fields."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def fields(self, msg: str) -> list[dict[str, Any]]:
        return [dict(getattr(r, "kv", {})) for r in self.records if r.getMessage() == msg]


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("bubblewatch.daemon")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


REFUSED = "setting not applied: it changes only at a restart; the previous value stays in force"


def reload_metrics(m: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in m.items() if k.startswith("bubblewatch_config_")}


def test_refused_and_invalid_reloads_are_logged_counted_and_keep_the_old_config(
    tmp_path: Path, records: Records
) -> None:
    d, clock, source, cfg = start(tmp_path, busy)
    text = cfg.read_text()
    listen = d.cfg.web.listen_address

    def rewrite(**changes: Any) -> None:
        data = yaml.safe_load(text)
        for section, values in changes.items():
            data[section] = {**data[section], **values}
        cfg.write_text(yaml.safe_dump(data))

    # 5.1: a new interval (applies) and a new listen address and path (need a restart).
    clock.at(
        5.1,
        action=lambda: rewrite(
            sampling={"interval": "500ms"},
            web={"listen_address": "127.0.0.1:1", "telemetry_path": "/m"},
        ),
    )
    clock.at(5.1, signum=signal.SIGHUP)
    clock.at(7.1, signum=signal.SIGHUP)  # the same file again: still refused, still said
    clock.at(10.1, action=lambda: cfg.write_text("sampling: [not, a, mapping]\n"))
    clock.at(10.1, signum=signal.SIGHUP)
    clock.at(15.1, action=lambda: cfg.write_text(text))  # back as started: everything applies
    clock.at(15.1, signum=signal.SIGHUP)
    looks = every(
        clock,
        [5.0, 7.0, 10.0, 15.0, 20.0],
        lambda: (reload_metrics(scrape(d)), source.interval, d.cfg.web.listen_address),
    )
    oldest: list[float] = []
    ports = every(clock, [5.0, 7.0], lambda: d.server.port)
    clock.at(15.0, action=lambda: oldest.append(float(d.ring.last(60.0).series[0].t_s[0])))
    run_until(d, clock, 20.0)

    def counts(m: dict[str, float]) -> tuple[float, float, float]:
        return tuple(  # type: ignore[return-value]
            m[f'bubblewatch_config_reloads_total{{result="{r}"}}']
            for r in ("applied", "refused", "invalid")
        )

    pending = 'bubblewatch_config_restart_required{setting="%s"}'
    ok = "bubblewatch_config_last_reload_successful"
    (m0, i0, l0), (m1, i1, l1), (m2, i2, l2), (m3, i3, l3), (m4, i4, l4) = looks
    # Before any reload: every result exported from 0, nothing pending.
    assert counts(m0) == (0, 0, 0) and m0[ok] == 1.0 and (i0, l0) == (0.2, listen)
    assert not any(k.startswith("bubblewatch_config_restart_required") for k in m0)
    # Refused: the interval applied, the address and path kept, both shown as pending.
    assert counts(m1) == (0, 1, 0) and m1[ok] == 1.0 and (i1, l1) == (0.5, listen)
    assert m1[pending % "web.listen_address"] == 1.0 and m1[pending % "web.telemetry_path"] == 1.0
    assert ports[0] == ports[1] != 1  # still serving where it started
    # The same file again is refused again (the old values are still in force).
    assert counts(m2) == (0, 2, 0) and (i2, l2) == (0.5, listen)
    # Invalid: nothing changes, the interval stays 500 ms, the pending settings stay pending.
    assert counts(m3) == (0, 2, 1) and m3[ok] == 0.0 and (i3, l3) == (0.5, listen)
    assert m3[pending % "web.listen_address"] == 1.0
    # Applied: everything as started, nothing pending any more.
    assert counts(m4) == (1, 2, 1) and m4[ok] == 1.0 and (i4, l4) == (0.2, listen)
    assert not any(k.startswith("bubblewatch_config_restart_required") for k in m4)
    assert m4["bubblewatch_config_last_reload_success_timestamp_seconds"] == WALL0 + 15.1
    # No collected data lost: the ring still holds the first samples at 15 s.
    assert oldest == [WALL0]

    refused = records.fields(REFUSED)
    assert [r["setting"] for r in refused] == ["web.listen_address", "web.telemetry_path"] * 2
    assert refused[0]["in_force"] == listen and refused[0]["file"] == "127.0.0.1:1"
    assert "restart" in refused[0]["why"] or "started" in refused[0]["why"]
    done = records.fields("configuration reloaded")
    assert [r["result"] for r in done] == ["refused", "refused", "applied"]
    assert done[0]["restart_required"] == "web.listen_address,web.telemetry_path"
    (failed,) = records.fields("reload failed; keeping the previous configuration and rules")
    assert failed["result"] == "invalid" and "sampling" in failed["error"]
