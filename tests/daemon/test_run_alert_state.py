"""Alert state across a real daemon's kill and restart.

Regression: a rule still firing after a restart was re-sent as a new firing
alert with a new `starts_at`, and a rule that stopped firing while the daemon
was down never got a `resolved`. Here the first daemon fires AlwaysA and
AlwaysB and is killed with SIGKILL; AlwaysB is removed from the rules while
it is down; the second daemon must send nothing for AlwaysA (still firing,
same `starts_at`) and, once its first analysis window is full, a `resolved`
for AlwaysB carrying the original `starts_at` and an `ends_at`.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from ._inbox import Inbox, inbox
from ._proc import rule_file, running, wait_for, write_config

__all__ = ["inbox"]

WINDOW_S = 3.0

WINDOW_S = 3.0


def _unix(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def test_restart_keeps_starts_at_and_resolves_what_stopped_firing(
    tmp_path: Path, inbox: Inbox
) -> None:
    rules = rule_file(tmp_path / "site.rules.yaml", ["AlwaysA", "AlwaysB"])
    cfg = write_config(
        tmp_path / "bubblewatch.yml",
        rules={"files": [str(rules)]},
        analysis={"interval": "500ms", "window": f"{WINDOW_S}s"},
        alerting={
            "repeat_interval": "1h",
            "receivers": [{"name": "hook", "type": "webhook", "url": inbox.url}],
        },
    )
    with running(cfg) as d1:
        wait_for(
            lambda: inbox.got("AlwaysA", "firing") and inbox.got("AlwaysB", "firing"),
            timeout_s=30,
            what="AlwaysA and AlwaysB firing from the first daemon",
        )
        d1.proc.kill()  # no clean shutdown: the state must already be on disk
        d1.proc.wait(10)
    (a_fired,) = inbox.got("AlwaysA", "firing")
    (b_fired,) = inbox.got("AlwaysB", "firing")
    before = len(inbox.alerts)

    rule_file(rules, ["AlwaysA"])  # AlwaysB stops firing while no daemon runs
    started = time.time()
    with running(cfg, log_name="daemon2.log") as d2:
        (resolved,) = wait_for(
            lambda: inbox.got("AlwaysB", "resolved"),
            timeout_s=30,
            what="AlwaysB resolved by the restarted daemon",
        )
        time.sleep(1.0)  # a few more analyses: nothing else may be sent
        restored = d2.lines(
            "restored firing alerts; those whose rule no longer fires are resolved "
            "after the first full analysis window"
        )
        queued = d2.lines("alert queued")
        rc, _ = d2.stop()
        assert rc == 0, d2.log
    assert restored and int(restored[0]["alerts"]) >= 2
    assert resolved["fingerprint"] == b_fired["fingerprint"]
    assert resolved["starts_at"] == b_fired["starts_at"]
    # Resolved on a full window's evidence, not on the empty first windows after the start.
    assert _unix(resolved["ends_at"]) >= started + WINDOW_S
    # AlwaysA kept firing: nothing new was sent for it, its start time stands.
    assert [q["alertname"] for q in queued] == ["AlwaysB"]
    assert inbox.got("AlwaysA", "firing") == [a_fired]
    assert len(inbox.alerts) == before + 1


def test_a_fresh_start_sends_no_insufficient_data_pair(tmp_path: Path, inbox: Inbox) -> None:
    """Regression: every start sent InsufficientData firing, then resolved, to all receivers.

    The first analyses run on a window shorter than the detector needs (10 s); once
    the 10.5 s window is full the verdict is informative: not enough data was no news.
    """
    cfg = write_config(
        tmp_path / "bubblewatch.yml",
        alerting={"receivers": [{"name": "hook", "type": "webhook", "url": inbox.url}]},
    )
    with running(cfg) as d:
        wait_for(
            lambda: [x for x in d.lines("diagnosis") if "insufficient" not in x["status"]],
            timeout_s=40,
            what="a diagnosis on a full window",
        )
        early = [x["status"] for x in d.lines("diagnosis")]
        time.sleep(1.5)  # a few more analyses
        rc, _ = d.stop()
        assert rc == 0, d.log
    assert any("insufficient" in s for s in early), early  # the partial windows were seen
    assert [q for q in d.lines("alert queued") if q["alertname"] == "InsufficientData"] == []
    assert not inbox.got("InsufficientData", "firing")
    assert not inbox.got("InsufficientData", "resolved")
