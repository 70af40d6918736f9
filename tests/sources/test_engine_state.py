"""Reading an engine's live settings back over real HTTP, and judging a live update per release.

The stand-in (tests/nvml/engine_server.py) answers as the released SGLang wheels
do: `/get_server_info` only before 0.5.6, the cap's old name up to 0.5.3, and a
`/set_internal_state` answer that says `true` even when refused up to 0.5.14.
"""

from __future__ import annotations

import json
import logging
import urllib.request

import pytest
from nvml.engine_server import EngineServer, SglangState, release_at_least

from bubblewatch.rules.engine_facts import engine_facts
from bubblewatch.sources.engine_state import (
    EngineStateReader,
    LiveState,
    StateParseError,
    judge_update,
    parse_server_info,
    parse_update_reply,
    reply_trusted,
    state_paths,
)
from bubblewatch.topology.engine_config import EngineConfig

KEY = "sk-STATEtestkey0123456789abcdefXYZ"
RELEASES = ["0.5.3", "0.5.3.post1", "0.5.7", "0.5.14", "0.5.15", "0.5.23"]


def _url(server: EngineServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def operator_sets(server: EngineServer, cap_key: str, value: int, key: str | None = None) -> str:
    """What an operator's curl does: POST /set_internal_state; the answer's text."""
    body = json.dumps({"server_args": {cap_key: value}}).encode()
    req = urllib.request.Request(f"{_url(server)}/set_internal_state", data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return str(resp.read().decode())


@pytest.mark.parametrize("version", RELEASES)
def test_reads_the_live_cap_under_each_releases_name_and_path(version: str) -> None:
    st = SglangState(version, pp_size=8, max_running=64, depth=1)
    with EngineServer(0, 0, state=st) as server:
        reader = EngineStateReader(_url(server), version=version)
        got = reader.read()
    assert got.reason is None and got.state is not None
    live = got.state
    old_name = version == "0.5.3"
    assert live.cap_key == ("max_micro_batch_size" if old_name else "pp_max_micro_batch_size")
    assert live.path == (
        "/get_server_info" if not release_at_least(version, "0.5.6") else "/server_info"
    )
    assert [p for p, _ in server.requests] == [live.path]  # the right path first, no probing
    assert live.get("pp_max_micro_batch_size") == 8  # the scheduler's default, max(64 // 8, 1)
    assert live.startup.get("pp_max_micro_batch_size") is None  # not set at start
    # Depth: the release has it from 0.5.7; the effective limit is reported from 0.5.14.
    assert live.get("pp_async_batch_depth") == (
        None if not release_at_least(version, "0.5.7") else 1
    )
    assert live.get("max_running_requests") == (64 if release_at_least(version, "0.5.14") else None)
    assert live.version == version and live.schedulers == 1


def test_a_release_not_known_tries_server_info_then_the_old_path() -> None:
    with EngineServer(0, 0, state=SglangState("0.5.3.post1", pp_size=4, max_running=32)) as server:
        got = EngineStateReader(_url(server), version=None).read()
    assert got.state is not None and got.state.get("pp_max_micro_batch_size") == 8
    assert [p for p, _ in server.requests] == ["/server_info", "/get_server_info"]


@pytest.mark.parametrize("version", RELEASES)
def test_an_update_is_taken_or_refused_as_the_release_says(version: str) -> None:
    st = SglangState(version, pp_size=8, max_running=64)
    with EngineServer(0, 0, state=st) as server:
        reader = EngineStateReader(_url(server), version=version)
        # A cap in range [1, 64 // 8] takes; the read-back shows it.
        reply = parse_update_reply(operator_sets(server, st.cap_key, 2))
        after = reader.read().state
        assert after is not None and after.get("pp_max_micro_batch_size") == 2
        asked = {st.cap_key: 2}
        assert judge_update(asked, version=version, reply=reply, after=after).status == "taken"
        # 100 is out of range: the scheduler refuses, whatever the answer says.
        reply = parse_update_reply(operator_sets(server, st.cap_key, 100))
        after = reader.read().state
    assert after is not None and after.get("pp_max_micro_batch_size") == 2
    trusted = release_at_least(version, "0.5.15")
    assert reply == ((False,) if trusted else (True,))
    assert reply_trusted(version) is trusted
    asked = {st.cap_key: 100}
    # The reply alone: the verdict from 0.5.15; before, it decides nothing.
    alone = judge_update(asked, version=version, reply=reply)
    assert alone.status == ("refused" if trusted else "unconfirmed"), alone
    # With the read-back: refused on every release, and before 0.5.15 it says why the
    # answer was no help.
    judged = judge_update(asked, version=version, reply=reply, after=after)
    assert judged.status == "refused"
    assert ("said updated" in judged.why) is (not trusted), judged.why


def test_the_facts_follow_the_live_value_with_their_source() -> None:
    st = SglangState("0.5.15", pp_size=8, max_running=64)
    engine = EngineConfig("sglang", pp_size=8, version="0.5.15", port=1)
    with EngineServer(0, 0, state=st) as server:
        reader = EngineStateReader(_url(server), version="0.5.15")
        first = reader.read().state
        operator_sets(server, st.cap_key, 2)
        second = reader.read().state
    cmdline = engine_facts(engine)
    assert cmdline["live_known"] is False and cmdline["micro_batch_size"] is None
    assert set(cmdline["settings_source"].values()) == {"cmdline"}
    at_start = engine_facts(engine, first)
    # The default cap is still "unset" (the rules tell an unset cap from a set one) but
    # its value, and the limit the scheduler applies, are known now.
    assert at_start["pp_max_micro_batch_size"] is None and at_start["micro_batch_size"] == 8
    assert at_start["max_running_requests"] == 64
    assert at_start["settings_source"]["micro_batch_size"] == "live"
    assert at_start["settings_source"]["pp_max_micro_batch_size"] == "cmdline"
    changed = engine_facts(engine, second)
    assert changed["pp_max_micro_batch_size"] == 2 and changed["micro_batch_size"] == 2
    assert changed["settings_source"]["pp_max_micro_batch_size"] == "live"
    assert changed["live_cap_key"] == "pp_max_micro_batch_size"


def test_the_api_key_goes_to_the_engine_only_and_is_never_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    st = SglangState("0.5.23", pp_size=2, max_running=16, api_key=KEY)
    with EngineServer(0, 0, state=st) as server:
        without = EngineStateReader(_url(server), version="0.5.23").read()
        assert without.state is None and "401" in str(without.reason)
        assert "BUBBLEWATCH_ENGINE_API_KEY" in caplog.text  # what to do about it
        got = EngineStateReader(_url(server), version="0.5.23", api_key=KEY).read()
        assert got.state is not None and got.state.get("pp_max_micro_batch_size") == 8
        assert server.requests[-1] == ("/server_info", f"Bearer {KEY}")
        # A redirect (to another host, say) is refused: the key never follows it.
        with EngineServer(0, 0, state=st) as elsewhere:
            server.redirect_to = _url(elsewhere)
            moved = EngineStateReader(_url(server), version="0.5.23", api_key=KEY).read()
        assert moved.state is None and "302" in str(moved.reason)
        assert elsewhere.requests == []
    # The engine's answer holds its own API key: none of it is kept, nothing logs it.
    assert KEY not in repr(got.state) and KEY not in caplog.text


def test_an_oversized_slow_or_absent_answer_is_a_reason_never_an_exception() -> None:
    st = SglangState("0.5.15", pp_size=2, max_running=16)
    with EngineServer(0, 0, state=st) as server:
        big = EngineStateReader(_url(server), version="0.5.15", max_bytes=64).read()
        assert big.state is None and "larger than 64 bytes" in str(big.reason)
        server.delay_s = 0.5
        slow = EngineStateReader(_url(server), version="0.5.15", timeout_s=0.1).read()
        assert slow.state is None and "timed out" in str(slow.reason)
    with EngineServer(0, 0) as bare:  # serves /metrics only
        reader = EngineStateReader(_url(bare), version="0.5.15")
        gone = reader.read()
    assert gone.state is None and "404" in str(gone.reason)
    assert reader.failures == {"http": 1}


def test_vllm_and_trtllm_serve_no_live_settings() -> None:
    assert state_paths("vllm", "0.12.0") == () and state_paths("trtllm", None) == ()
    got = EngineStateReader("http://127.0.0.1:9", engine="vllm").read()
    assert got.state is None and "no live settings" in str(got.reason)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"model_path": "m"}', "no server arguments"),
        ("[" * 100_000, "not JSON"),  # nested past the parser's depth: an error, not a crash
    ],
)
def test_answers_without_settings_are_refused_precisely(text: str, why: str) -> None:
    with pytest.raises(StateParseError, match=why):
        parse_server_info(text)


def test_schedulers_that_disagree_are_said_and_bad_values_ignored() -> None:
    text = json.dumps({
        "pp_async_batch_depth": 0,
        "internal_states": [
            {"pp_max_micro_batch_size": 4, "effective_max_running_requests_per_dp": True},
            {"pp_max_micro_batch_size": 6},
        ],
    })  # fmt: skip
    live = parse_server_info(text)
    assert live.get("pp_max_micro_batch_size") == 4 and live.disagree == (
        "pp_max_micro_batch_size",
    )
    assert live.get("max_running_requests") is None  # a bool is not a count
    assert live.get("pp_async_batch_depth") == 0 and live.schedulers == 2
    with pytest.raises(StateParseError, match="list of booleans"):
        parse_update_reply('{"ok": 1}')


def test_a_bad_engine_url_is_refused_at_construction() -> None:
    for url in ("ftp://h:1", "http://h:1/x", "http://u:p@h:1", "http://h:1?k=v"):
        with pytest.raises(ValueError, match="engine URL"):
            EngineStateReader(url)


@pytest.mark.parametrize("version", ["0.5.14", "0.5.15"])
def test_cli_says_whether_an_update_took_whatever_the_answer_said(
    version: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bubblewatch engine-state --expect`: the operator's check after their curl."""
    from bubblewatch.cli.main import main

    monkeypatch.setenv("BUBBLEWATCH_ENGINE_API_KEY", KEY)
    st = SglangState(version, pp_size=8, max_running=64, api_key=KEY)
    with EngineServer(0, 0, state=st) as server:
        reply = operator_sets(server, st.cap_key, 100, KEY)  # out of range: refused
        code = main(["engine-state", _url(server), "--expect", f"{st.cap_key}=100",
                     "--reply", reply, "--json"])  # fmt: skip
        out = json.loads(capsys.readouterr().out)
        operator_sets(server, st.cap_key, 4, KEY)
        took = main(["engine-state", _url(server), "--expect", f"{st.cap_key}=4"])
        text = capsys.readouterr().out
    assert code == 1 and out["update"]["status"] == "refused", out
    # 0.5.14 answered [true]: the read-back says otherwise, and why the answer was no help.
    assert json.loads(reply) == [version == "0.5.14"]
    assert ("said updated" in out["update"]["why"]) is (version == "0.5.14")
    assert out["state"]["settings"]["pp_max_micro_batch_size"] == 8
    assert took == 0 and "update taken: read back pp_max_micro_batch_size=4" in text
    assert KEY not in json.dumps(out) + text


@pytest.mark.parametrize(
    ("argv", "path"),
    [
        (["--expect", "pp_max_micro_batch_size"], "--expect"),
        (["--expect", "pp_max_micro_batch_size=x"], "--expect"),
        (["--reply", "yes"], "--reply"),
        (["--engine-version", "latest"], "--engine-version"),
        (["--timeout", "0"], "--timeout"),
    ],
)
def test_cli_bad_arguments_get_a_precise_error(
    argv: list[str], path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from bubblewatch.cli.main import main

    assert main(["engine-state", "http://127.0.0.1:9", *argv]) == 2
    assert path in capsys.readouterr().err


def test_cli_a_bad_url_gets_a_precise_error(capsys: pytest.CaptureFixture[str]) -> None:
    from bubblewatch.cli.main import main

    assert main(["engine-state", "http://127.0.0.1:9/server_info"]) == 2
    assert "engine URL must be http(s)://host:port" in capsys.readouterr().err


def test_a_keyed_servers_version_comes_from_its_read_back() -> None:
    """The version probe sends no key: behind --api-key the read-back tells the release."""
    st = SglangState("0.5.13.post1", pp_size=8, max_running=64, api_key=KEY)
    with EngineServer(0, 0, state=st) as server:
        live = EngineStateReader(_url(server), api_key=KEY).read().state
    assert live is not None and live.version == "0.5.13.post1"
    unknown = EngineConfig("sglang", pp_size=8, port=server.port)
    facts = engine_facts(unknown, live)
    assert facts["version"] == "0.5.13.post1" and facts["version_known"] is True
    assert facts["flag_table"] is not None  # the release's flag table applies now
    assert engine_facts(unknown)["version_known"] is False


def test_without_a_read_back_false_is_refused_on_every_release_true_only_trusted_late() -> None:
    asked = {"pp_max_micro_batch_size": 4}
    for version in ("0.5.3.post1", "0.5.14", "0.5.15", None):
        assert judge_update(asked, version=version, reply=(True, False)).status == "refused"
    assert judge_update(asked, version="0.5.15", reply=(True, True)).status == "taken"
    for version in ("0.5.14", None):
        assert judge_update(asked, version=version, reply=(True,)).status == "unconfirmed"
    assert judge_update(asked, version="0.5.23").status == "unconfirmed"


def test_a_recorded_snapshot_reads_back_as_it_was_written() -> None:
    """`record` keeps `to_dict()` in the trace header; `recorded_state` gives it back."""
    from bubblewatch.sources.engine_state import recorded_state

    cap = "pp_max_micro_batch_size"
    state = LiveState(12.0, "/server_info", "0.5.23", {cap: 3}, {}, cap, 2, (cap,))
    back = recorded_state({"engine_live": state.to_dict()})
    assert back is not None and back.to_dict() == state.to_dict()
    # An error said at record time, a damaged snapshot or none at all: no live state.
    assert recorded_state({"engine_live": {"error": "HTTP 401"}}) is None
    assert recorded_state({"engine_live": {"settings": [1, 2]}}) is None
    assert recorded_state({"engine_live": "x"}) is None and recorded_state({}) is None
