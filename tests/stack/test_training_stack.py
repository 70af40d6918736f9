"""A training pipeline in the operator's stack: the dashboard's training row and its alert.

One real `bubblewatch run` plays a simulated Megatron-LM 1F1B pipeline (p=4, m=8) whose
first stage waits 100 ms a step on its data loader; the daemon discovers its layout from
the launch command, judges the measured bubble against the schedule's and exports the
training series. A real Prometheus scrapes it with the shipped rules (every alert's `for`
cut to 2 s): every query of the pipeline dashboard's training row returns data, and
BubblewatchBubbleAboveSchedule fires for the pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .daemon_util import daemon
from .dashboard_util import DASHBOARD_DIR, load_dashboard, panel_queries, render
from .stack_util import PROMETHEUS, get_json, prometheus, wait_until
from .test_e2e import TRAINING_SERIES, _query, fast_rules

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="needs the Debian package `prometheus`"),
]

ALERT = "BubblewatchBubbleAboveSchedule"


def _firing(url: str) -> list[dict[str, Any]]:
    doc = get_json(f"{url}/api/v1/alerts")
    return [
        a
        for a in doc["data"]["alerts"]
        if a["labels"].get("alertname") == ALERT and a["state"] == "firing"
    ]


def test_training_row_has_data_and_the_schedule_alert_fires(tmp_path: Path) -> None:
    with daemon(
        tmp_path / "bw",
        "train-host",
        simulate="pp4-1f1b-loader",
        sampling={"interval": "100ms"},
        analysis={"interval": "1s", "window": "12s"},
    ) as bw:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(fast_rules(tmp_path / "rules.yml"))],
            "scrape_configs": [
                {"job_name": "bubblewatch", "static_configs": [{"targets": [bw.target]}]}
            ],
        }
        with prometheus(tmp_path, config) as prom:
            pipeline = "train-host/megatron"
            values = {"instance": bw.target, "pipeline": pipeline, "datasource": "prometheus"}
            dash = load_dashboard(DASHBOARD_DIR / "bubblewatch-pipeline.json")
            queries = [q for q in panel_queries(dash) if any(s in q.expr for s in TRAINING_SERIES)]
            assert len(queries) == 4, [q.where() for q in queries]  # the training row
            missing: list[str] = []

            def row_has_data() -> bool:
                missing[:] = [
                    q.where() for q in queries if not _query(prom.url, render(q.expr, values))
                ]
                return not missing

            try:
                wait_until(row_has_data, 60, "the training row's queries returning data", 1.0)
            except TimeoutError:
                pytest.fail(f"no data: {missing}\ndaemon log:\n{bw.log_text()[-3000:]}")
            wait_until(lambda: bool(_firing(prom.url)), 30, f"{ALERT} firing", 1.0)
            (alert,) = _firing(prom.url)
            assert alert["labels"]["pipeline"] == pipeline
            excess = float(alert["value"])
            assert 0.05 < excess < 0.3  # ~0.11 above the schedule's 27%
            [expected] = _query(
                prom.url, f'bubblewatch_pipeline_expected_bubble_ratio{{pipeline="{pipeline}"}}'
            )
            assert float(expected["value"][1]) == pytest.approx(3 / 11, abs=1e-3)
