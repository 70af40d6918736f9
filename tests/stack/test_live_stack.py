"""The shipped rules in a real Prometheus, and the test helpers against real services."""

from __future__ import annotations

import time
from typing import Any

import pytest

from .dashboard_util import RULE_FILE, load_rules
from .stack_util import (
    ALERTMANAGER,
    PROMETHEUS,
    ServiceError,
    alertmanager,
    get_json,
    post_json,
    prometheus,
    wait_until,
    webhook_receiver,
)

needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not installed (Debian package `prometheus`)"
)
needs_alertmanager = pytest.mark.skipif(
    ALERTMANAGER is None,
    reason="alertmanager not installed (Debian package `prometheus-alertmanager`)",
)


@needs_prometheus
def test_prometheus_loads_and_evaluates_the_shipped_rules(tmp_path):
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULE_FILE)],
    }
    shipped = load_rules()
    with prometheus(tmp_path, config) as prom:

        def groups() -> list[dict[str, Any]]:
            data: list[dict[str, Any]] = get_json(prom.url + "/api/v1/rules")["data"]["groups"]
            return data

        def all_evaluated() -> bool:
            rules = [r for g in groups() for r in g["rules"]]
            return len(rules) == len(shipped) and all(
                not r["lastEvaluation"].startswith("0001") for r in rules
            )

        wait_until(all_evaluated, 20, "every rule evaluated once")
        loaded = {r["name"]: r for g in groups() for r in g["rules"]}
    assert set(loaded) == {r.name for r in shipped}
    for r in shipped:
        got = loaded[r.name]
        assert got["type"] == ("recording" if r.kind == "record" else "alerting")
        assert got["health"] == "ok", f"{r.name}: {got.get('lastError')}"
        if r.kind == "alert":
            assert got["annotations"]["runbook"], r.name
            assert got["state"] == "inactive", f"{r.name} fires with no data"


@needs_prometheus
def test_prometheus_helper_reports_a_bad_config(tmp_path):
    with pytest.raises(ServiceError, match="exited"), prometheus(tmp_path, {"global": 5}):
        pass


@needs_alertmanager
def test_alertmanager_delivers_to_the_webhook_receiver(tmp_path):
    with webhook_receiver() as hook:
        config = {
            "route": {
                "receiver": "hook",
                "group_by": ["alertname"],
                "group_wait": "0s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "hook",
                    "webhook_configs": [{"url": hook.url + "/alerts", "send_resolved": True}],
                }
            ],
        }
        with alertmanager(tmp_path, config) as am:
            now = time.time()
            alert = {
                "labels": {"alertname": "BubblewatchStackTest", "pipeline": "p"},
                "annotations": {"summary": "helper check"},
                "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 5)),
            }
            assert post_json(am.url + "/api/v2/alerts", [alert]) == 200
            path, body = hook.wait_for(
                lambda p, b: isinstance(b, dict) and b.get("status") == "firing", 15
            )
    assert path == "/alerts"
    (got,) = body["alerts"]
    assert got["labels"] == {"alertname": "BubblewatchStackTest", "pipeline": "p"}
    assert got["annotations"]["summary"] == "helper check"


def test_webhook_receiver_times_out_with_what_it_saw():
    with webhook_receiver() as hook:
        post_json(hook.url + "/x", {"status": "resolved"})
        with pytest.raises(TimeoutError, match=r"\['/x'\]"):
            hook.wait_for(lambda p, b: b.get("status") == "firing", 0.3)
