"""Alert identity, the tracker's dedupe/repeat/resolve, and each receiver's payload shape."""

from __future__ import annotations

import json

import pytest

from bubblewatch.sinks.alerts import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Alert,
    AlertmanagerReceiver,
    AlertStatus,
    AlertTracker,
    SlackReceiver,
    WebhookReceiver,
)

from ._signing import verify

REC = {
    "rule": "pp_serialized_under_load",
    "severity": "critical",
    "summary": "Pipeline runs serialized under load",
    "description": "Stage occupancy sums to 1.02 of 8.",
    "labels": {"engine": "sglang"},
    "fix": "--pp-async-batch-depth 8",
}


def alert(rule: str = "r1", pipeline: str = "pp-a", t: float = 1000.0) -> Alert:
    return Alert.from_recommendation({**REC, "rule": rule}, now_s=t, pipeline=pipeline)


def test_fingerprint_depends_on_labels_only_and_not_their_order() -> None:
    a = Alert(labels={"alertname": "x", "pipeline": "p"}, summary="one", starts_at_s=1)
    b = Alert(labels={"pipeline": "p", "alertname": "x"}, summary="two", starts_at_s=2)
    c = Alert(labels={"alertname": "x", "pipeline": "q"})
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != c.fingerprint
    assert len(a.fingerprint) == 16


def test_from_recommendation_labels_and_round_trip() -> None:
    a = Alert.from_recommendation(
        REC, now_s=1_700_000_000.5, pipeline="pp-a", extra_labels={"instance": "gpu-host-1"}
    )
    assert dict(a.labels) == {
        "alertname": "pp_serialized_under_load",
        "severity": "critical",
        "pipeline": "pp-a",
        "engine": "sglang",
        "instance": "gpu-host-1",
    }
    assert a.fix == "--pp-async-batch-depth 8"
    back = Alert.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back == a
    assert a.to_dict()["starts_at"] == "2023-11-14T22:13:20.500Z"


def test_from_recommendation_without_rule_is_an_error() -> None:
    with pytest.raises(ValueError, match="no 'rule' name"):
        Alert.from_recommendation({"severity": "info"}, now_s=0)


def test_rule_without_description_gives_an_empty_one_not_none() -> None:
    """Regression: `str(None)` made every such alert's description the text "None"."""
    a = Alert.from_recommendation({**REC, "description": None}, now_s=0)
    assert a.description == ""
    body = json.loads(AlertmanagerReceiver("am", "http://am/").build_request([a], 0).body)
    assert "description" not in body[0]["annotations"]


def test_tracker_sends_new_dedupes_repeats_and_resolves() -> None:
    tr = AlertTracker(repeat_interval_s=60)
    a, b = alert("r1"), alert("r2")
    assert [x.name for x in tr.update([a, a, b], 0)] == ["r1", "r2"]  # duplicate in one tick
    assert tr.update([a, b], 30) == []  # still firing, not yet due
    due = tr.update([a], 61)  # r1 repeats, r2 resolves
    assert [(x.name, x.status) for x in due] == [
        ("r1", AlertStatus.FIRING),
        ("r2", AlertStatus.RESOLVED),
    ]
    assert due[0].starts_at_s == a.starts_at_s
    assert due[1].ends_at_s == 61
    assert tr.update([a], 90) == []  # repeat timer restarted at 61
    gone = tr.update([], 95)
    assert [(x.name, x.status) for x in gone] == [("r1", AlertStatus.RESOLVED)]
    assert tr.update([], 200) == []


def test_webhook_payload_and_hmac_signature_verify() -> None:
    recv = WebhookReceiver("ops", "http://127.0.0.1:1/hook", secret="s3cr3t")
    req = recv.build_request([alert()], now_s=1_700_000_000)
    body = json.loads(req.body)
    assert body["version"] == "1" and body["receiver"] == "ops"
    assert body["alerts"][0]["labels"]["alertname"] == "r1"
    assert body["alerts"][0]["status"] == "firing"
    ts = req.headers[TIMESTAMP_HEADER]
    sig = req.headers[SIGNATURE_HEADER]
    assert sig.startswith("sha256=")
    assert verify("s3cr3t", ts, req.body, sig)
    assert not verify("wrong", ts, req.body, sig)
    assert not verify("s3cr3t", ts, req.body + b" ", sig)
    assert "s3cr3t" not in repr(recv) and "127.0.0.1" not in repr(recv)


def test_unsigned_webhook_has_no_signature_header() -> None:
    req = WebhookReceiver("ops", "http://x/").build_request([alert()], now_s=0)
    assert SIGNATURE_HEADER not in req.headers


def test_slack_payload_shape() -> None:
    recv = SlackReceiver("slack", "https://hooks.slack.invalid/T/B/X")
    req = recv.build_request([alert(), alert("r2").resolved(2000)], now_s=0)
    body = json.loads(req.body)
    assert set(body) == {"text", "blocks"}
    assert "[FIRING] r1 on pipeline pp-a" in body["text"]
    assert "[RESOLVED] r2" in body["text"]
    assert body["blocks"][0]["type"] == "section"
    assert body["blocks"][0]["text"]["type"] == "mrkdwn"
    assert "--pp-async-batch-depth 8" in body["blocks"][0]["text"]["text"]
    assert "Fix" not in body["blocks"][1]["text"]["text"]


def test_alertmanager_v2_payload_shape() -> None:
    recv = AlertmanagerReceiver(
        "am", "http://am:9093", generator_url="http://h:9842/", firing_validity_s=600
    )
    firing = alert(t=1_700_000_000)
    req = recv.build_request([firing, firing.resolved(1_700_000_100)], now_s=1_700_000_050)
    assert req.url == "http://am:9093/api/v2/alerts"
    body = json.loads(req.body)
    assert isinstance(body, list) and len(body) == 2
    for item in body:
        assert set(item) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
        assert item["labels"]["alertname"] == "r1"
        assert item["annotations"]["summary"] == REC["summary"]
        assert item["startsAt"] == "2023-11-14T22:13:20.000Z"
    assert body[0]["endsAt"] == "2023-11-14T22:24:10.000Z"  # now + validity while firing
    assert body[1]["endsAt"] == "2023-11-14T22:15:00.000Z"  # resolved time
    assert recv.build_request([firing], 0).url == "http://am:9093/api/v2/alerts"
    assert (
        AlertmanagerReceiver("am", "http://am/api/v2/alerts/").build_request([firing], 0).url
        == "http://am/api/v2/alerts"
    )
