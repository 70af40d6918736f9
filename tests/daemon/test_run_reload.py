"""SIGHUP reloads atomically: a broken rule file or config keeps the old state, and says so."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from ._proc import metric, rule_file, running, wait_for, write_config


def active(d, rule: str) -> float | None:  # type: ignore[no-untyped-def]
    return metric(d.metrics(), "bubblewatch_recommendation_active", rule=rule)


def test_bad_reload_keeps_old_rules_and_sets_metric(tmp_path: Path) -> None:
    rules = rule_file(tmp_path / "site.rules.yaml", ["AlwaysA"])
    cfg = write_config(tmp_path / "bubblewatch.yml", rules={"files": [str(rules)]})
    with running(cfg) as d:
        wait_for(lambda: active(d, "AlwaysA") == 1.0, timeout_s=30, what="AlwaysA to fire")
        assert metric(d.metrics(), "bubblewatch_config_last_reload_successful") == 1.0
        loaded_at = metric(d.metrics(), "bubblewatch_config_last_reload_success_timestamp_seconds")

        # A rule file that does not parse: the old rules stay in force.
        rules.write_text("version: 1\ngroups:\n  - name: test\n    rules:\n      - name: [\n")
        d.signal(signal.SIGHUP)
        wait_for(
            lambda: metric(d.metrics(), "bubblewatch_config_last_reload_successful") == 0.0,
            timeout_s=10,
            what="the reload-failed metric",
        )
        failed = d.lines("reload failed; keeping the previous configuration and rules")
        assert failed and str(rules) in failed[0]["error"]
        time.sleep(2.5)  # two more analyses under the old rules
        m = d.metrics()
        assert metric(m, "bubblewatch_recommendation_active", rule="AlwaysA") == 1.0
        assert metric(m, "bubblewatch_config_last_reload_success_timestamp_seconds") == loaded_at

        # A good rule file but a bad config value: still all or nothing.
        rule_file(rules, ["AlwaysB"])
        write_config(cfg, rules={"files": [str(rules)]}, sampling={"interval": "10ms"})
        d.signal(signal.SIGHUP)
        wait_for(
            lambda: (
                len(d.lines("reload failed; keeping the previous configuration and rules")) >= 2
            ),
            timeout_s=10,
            what="the second failed reload",
        )
        assert (
            "sampling.interval"
            in d.lines("reload failed; keeping the previous configuration and rules")[1]["error"]
        )
        time.sleep(1.5)
        assert active(d, "AlwaysA") == 1.0 and active(d, "AlwaysB") is None

        # An unknown simulated scenario fails the reload too (checked before anything swaps).
        write_config(cfg, rules={"files": [str(rules)]}, simulate="no-such-scenario")
        d.signal(signal.SIGHUP)
        fails = "reload failed; keeping the previous configuration and rules"
        wait_for(lambda: len(d.lines(fails)) >= 3, timeout_s=10, what="the third failed reload")
        assert "no built-in scenario called 'no-such-scenario'" in d.lines(fails)[2]["error"]

        # Fixed: the new rules replace the old ones and the metric recovers.
        write_config(cfg, rules={"files": [str(rules)]})
        d.signal(signal.SIGHUP)
        wait_for(lambda: active(d, "AlwaysB") == 1.0, timeout_s=10, what="AlwaysB to fire")
        m = d.metrics()
        assert metric(m, "bubblewatch_recommendation_active", rule="AlwaysA") is None
        assert metric(m, "bubblewatch_config_last_reload_successful") == 1.0
        assert (metric(m, "bubblewatch_config_last_reload_success_timestamp_seconds") or 0) > (
            loaded_at or 0
        )
        rc, took_s = d.stop()
        assert rc == 0 and took_s < 5.0


def test_bad_config_at_start_is_a_clean_error(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "bubblewatch.yml", sampling={"interval": "50ms"})
    with running(cfg) as d:
        rc = d.proc.wait(30)
        assert rc == 2
        assert "field 'sampling.interval': must be at least 0.1s" in d.log
        assert "bubblewatch.yml:" in d.log and "Traceback" not in d.log
