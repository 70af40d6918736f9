"""End to end in the operator's stack: daemon, Prometheus, Alertmanager, a webhook receiver.

One real `bubblewatch run` plays a serialized PP8 pipeline; a real Prometheus
scrapes it every second with the shipped rules loaded; a real Alertmanager
receives both Prometheus's alerts and the daemon's own (Alertmanager v2 API
receiver) and forwards them to a local webhook receiver. The test checks that
the serialized-pipeline alert reaches the receiver by both paths, that every
query of every shipped dashboard panel returns data from that Prometheus, and
that both alerts resolve when the scenario turns healthy (SIGHUP with a
changed `simulate`). All on loopback; every process is stopped afterwards.

Test overrides, so that this runs in about a minute instead of tens: the
shipped Prometheus rules are copied with every alert's `for` cut to 2 s, and
the daemon gets one extra rule (`E2eSerialized`, `for: 2s`) in place of the
shipped `PipelineSerializedUnderLoad` and its `for: 2m`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml

from .daemon_util import daemon
from .dashboard_util import RULE_FILE, dashboard_paths, load_dashboard, panel_queries, render
from .stack_util import (
    ALERTMANAGER,
    PROMETHEUS,
    WebhookReceiver,
    alertmanager,
    get_json,
    prometheus,
    wait_until,
    webhook_receiver,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None or ALERTMANAGER is None,
        reason="needs the Debian packages `prometheus` and `prometheus-alertmanager`",
    ),
]

PIPELINE = "e2e-pp8"
PROM_ALERT = "BubblewatchPipelineSerializedUnderLoad"  # Prometheus's rule (rules/prometheus)
DAEMON_ALERT = "E2eSerialized"  # the daemon's own rule, posted to Alertmanager's v2 API
ALERT_FOR_S = 2
# Dashboard series that exist only after an event no simulation produces: an NVML
# call failing, an engine setting changed live. The query must still run; it may come
# back empty.
EVENT_ONLY_SERIES = ("bubblewatch_nvml_errors_total", "bubblewatch_engine_live_changes_total")
# Series of training pipelines judged against their schedule: this test plays a serving
# pipeline; tests/stack/test_training_stack.py checks them against a training one.
TRAINING_SERIES = (
    "bubblewatch_pipeline_measured_bubble_ratio",
    "bubblewatch_pipeline_expected_bubble_ratio",
    "bubblewatch_pipeline_step_period_seconds",
    "bubblewatch_stage_step_busy_seconds",
)

DAEMON_RULES = f"""version: 1
groups:
  - name: e2e
    rules:
      - name: {DAEMON_ALERT}
        expr: diagnosis.verdict == "serialized"
        for: {ALERT_FOR_S}s
        severity: critical
        labels: {{signature: serialized}}
        summary: pipeline serialized (end-to-end test rule)
"""


def fast_rules(path: Path) -> Path:
    """The shipped Prometheus rules with every alert's `for` cut to ALERT_FOR_S seconds."""
    doc = yaml.safe_load(RULE_FILE.read_text())
    n = 0
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "alert" in rule and "for" in rule:
                rule["for"] = f"{ALERT_FOR_S}s"
                n += 1
    assert n >= 5, "the shipped rules changed shape: expected alerts with `for`"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _alerts(hook: WebhookReceiver, status: str, name: str) -> list[dict[str, Any]]:
    """Alerts named `name` in `status` among the posts the receiver got so far."""
    out: list[dict[str, Any]] = []
    for _, body in list(hook.posts):
        if isinstance(body, dict):
            out.extend(
                a
                for a in body.get("alerts", [])
                if a.get("status") == status and a["labels"].get("alertname") == name
            )
    return out


def _wait_alert(
    hook: WebhookReceiver, status: str, name: str, timeout_s: float, context: Callable[[], str]
) -> dict[str, Any]:
    try:
        wait_until(lambda: bool(_alerts(hook, status, name)), timeout_s, f"{name} {status}", 0.2)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{context()}") from None
    return _alerts(hook, status, name)[0]


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    doc = get_json(f"{url}/api/v1/query?{urlencode({'query': expr})}")
    assert doc["status"] == "success", (expr, doc)
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def test_alerts_both_paths_dashboards_and_resolution(tmp_path: Path) -> None:
    rules = tmp_path / "daemon-rules.yml"
    rules.write_text(DAEMON_RULES)
    started = time.monotonic()
    with webhook_receiver() as hook:
        am_config = {
            "route": {
                "receiver": "hook",
                "group_by": ["alertname", "pipeline", "instance"],
                "group_wait": "1s",
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
        with (
            alertmanager(tmp_path, am_config) as am,
            daemon(
                tmp_path / "bw",
                "gpu-host-1",
                topology={"pipeline_id": PIPELINE},
                rules={"files": [str(rules)]},
                alerting={
                    "receivers": [
                        {"name": "alertmanager", "type": "alertmanager", "url": am.url,
                         "initial_backoff": "200ms", "max_backoff": "1s"},
                    ]
                },
            ) as bw,
        ):  # fmt: skip
            prom_config = {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(fast_rules(tmp_path / "rules.yml"))],
                "alerting": {
                    "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am.port}"]}]}]
                },
                "scrape_configs": [
                    {"job_name": "bubblewatch", "static_configs": [{"targets": [bw.target]}]}
                ],
            }
            with prometheus(tmp_path, prom_config) as prom:

                def context() -> str:
                    return (
                        f"posts: {[(p, b.get('status')) for p, b in hook.posts]}\n"
                        f"daemon log:\n{bw.log_text()[-3000:]}\n"
                        f"prometheus log:\n{prom.log_tail(1500)}"
                    )

                # 1. The serialized pipeline reaches the receiver by both paths.
                via_prom = _wait_alert(hook, "firing", PROM_ALERT, 60, context)
                via_daemon = _wait_alert(hook, "firing", DAEMON_ALERT, 30, context)
                assert via_prom["labels"]["pipeline"] == PIPELINE
                assert via_prom["labels"]["job"] == "bubblewatch"  # scraped, then alerted
                assert via_prom["labels"]["instance"] == bw.target
                assert via_prom["labels"]["severity"] == "critical"
                assert via_prom["annotations"]["runbook"]
                assert via_daemon["labels"]["pipeline"] == PIPELINE
                assert "job" not in via_daemon["labels"]  # posted by the daemon itself
                assert via_daemon["labels"]["instance"] == "gpu-host-1"
                assert via_daemon["labels"]["signature"] == "serialized"

                # 2. Every query of every dashboard panel returns data from this Prometheus.
                _check_dashboards(prom.url, instance=bw.target)

                # 3. The scenario turns healthy: both alerts resolve. (In between the
                # daemon says insufficient_data while its window refills after the
                # engine's settings changed; the check is for healthy itself.)
                bw.reconfigure(simulate="pp8-async")

                def healthy() -> bool:
                    now = _query(prom.url, "bubblewatch_pipeline_verdict == 1")
                    return [v["metric"]["verdict"] for v in now] == ["healthy"]

                wait_until(healthy, 60, "Prometheus to scrape the healthy verdict", 0.5)
                _wait_alert(hook, "resolved", DAEMON_ALERT, 20, context)
                _wait_alert(hook, "resolved", PROM_ALERT, 20, context)
                # Resolved, and not fired again since: the last word on each is `resolved`.
                for name in (DAEMON_ALERT, PROM_ALERT):
                    last = [a["status"] for _, b in hook.posts for a in b.get("alerts", [])
                            if a["labels"]["alertname"] == name][-1]  # fmt: skip
                    assert last == "resolved", (name, context())
    assert time.monotonic() - started < 180


def _check_dashboards(url: str, *, instance: str) -> None:
    values = {"instance": instance, "pipeline": PIPELINE, "datasource": "prometheus"}
    queries = [q for path in dashboard_paths() for q in panel_queries(load_dashboard(path))]
    assert len(queries) > 20, "the shipped dashboards changed shape"

    def empty() -> list[str]:
        out = []
        for q in queries:
            expr = render(q.expr, values)
            allowed = (*EVENT_ONLY_SERIES, *TRAINING_SERIES)
            if not _query(url, expr) and not any(s in expr for s in allowed):
                out.append(f"{q.where()}: {expr}")
        return out

    # Rates and increases need two scrapes in their window; give them a few seconds.
    missing: list[str] = []

    def all_have_data() -> bool:
        missing[:] = empty()
        return not missing

    try:
        wait_until(all_have_data, 20, "every dashboard query returning data", 1.0)
    except TimeoutError:
        pytest.fail("dashboard queries without data:\n" + "\n".join(missing))
    skipped = [q for q in queries if any(s in q.expr for s in EVENT_ONLY_SERIES)]
    # only the NVML-errors panel and the live-changes query of the engine-settings panel
    assert len(skipped) == 2, [q.where() for q in skipped]
