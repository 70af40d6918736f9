"""The web config accepts what exporter-toolkit accepts; the request parser answers at once.

Pins (issue 22, item 10): `http_server_config.headers: {Transfer-Encoding:
chunked}` was accepted and broke every scrape (exporter-toolkit allows five
headers); `min_version: TLS13` with `max_version: TLS10` was accepted; two
conflicting `Content-Length` headers got a 200; a request with bare-LF line
ends waited for the 10 s head deadline; at debug level the request path was
logged with its raw terminal escapes.
"""

from __future__ import annotations

import json
import logging
import socket
import tempfile
import time
from http import HTTPStatus
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bubblewatch.daemon.config.web import ALLOWED_HEADERS, load_web_config
from bubblewatch.daemon.config.yamlsrc import ConfigError
from bubblewatch.daemon.http.message import BadRequest, head_end, parse_request
from bubblewatch.daemon.http.server import MetricsServer
from bubblewatch.daemon.logging import JsonFormatter, LogfmtFormatter

from .test_http_refusals import server


def web_config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "web.yml"
    p.write_text(text)
    return p


# -- web config -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "key", "expect"),
    [
        ("{Transfer-Encoding: chunked}", "Transfer-Encoding", "cannot be configured"),
        ("{Content-Length: '0'}", "Content-Length", "cannot be configured"),
        ("{x-frame-options: deny}", "x-frame-options", "cannot be configured"),
        ("{X-Frame-Options: allow-from}", "X-Frame-Options", "must be one of deny, sameorigin"),
        ("{X-Content-Type-Options: sniff}", "X-Content-Type-Options", "must be one of nosniff"),
    ],
    ids=["transfer-encoding", "content-length", "name-case", "frame-value", "nosniff"],
)
def test_web_config_headers_outside_exporter_toolkits_list(
    tmp_path: Path, headers: str, key: str, expect: str
) -> None:
    p = web_config(tmp_path, f"http_server_config:\n  headers: {headers}\n")
    with pytest.raises(ConfigError) as e:
        load_web_config(p)
    assert e.value.field == f"http_server_config.headers.{key}" and e.value.line == 2
    assert expect in e.value.reason
    if "cannot be configured" in expect:
        assert ", ".join(ALLOWED_HEADERS) in e.value.reason


def test_web_config_every_allowed_header(tmp_path: Path) -> None:
    p = web_config(tmp_path, "http_server_config:\n  headers:\n"
                   "    Content-Security-Policy: default-src 'none'\n"
                   "    Strict-Transport-Security: max-age=31536000\n"
                   "    X-Content-Type-Options: nosniff\n"
                   "    X-Frame-Options: sameorigin\n"
                   "    X-XSS-Protection: '0'\n")  # fmt: skip
    assert sorted(load_web_config(p).headers) == sorted(ALLOWED_HEADERS)


def test_web_config_tls_range_that_is_empty(tmp_path: Path) -> None:
    """min_version TLS13 with max_version TLS10 leaves no version: refused at load."""
    p = web_config(tmp_path, "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n"
                   "  min_version: TLS13\n  max_version: TLS10\n")  # fmt: skip
    (tmp_path / "c.pem").write_text("x")
    (tmp_path / "k.pem").write_text("x")
    with pytest.raises(ConfigError) as e:
        load_web_config(p)
    assert e.value.field == "tls_server_config.max_version" and e.value.line == 5
    assert "TLS10 is below min_version TLS13" in e.value.reason


# -- request heads ------------------------------------------------------------------------


def test_conflicting_content_lengths_are_a_bad_request() -> None:
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n"
    with pytest.raises(BadRequest) as e:
        parse_request(head)
    assert e.value.response.status == HTTPStatus.BAD_REQUEST
    assert b"conflicting Content-Length" in e.value.response.body


def test_repeated_equal_content_length_zero_is_served() -> None:
    head = b"GET /metrics HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n"
    assert parse_request(head).path == "/metrics"


@pytest.mark.parametrize(
    "head",
    [b"GET /metrics HTTP/1.1\nHost: x\n\n", b"GET /metrics HTTP/1.0\n\n",
     b"GET /metrics HTTP/1.1\r\nHost: x\n\r\n"],
    ids=["bare-lf", "bare-lf-no-headers", "mixed"],
)  # fmt: skip
def test_bare_lf_heads_end_at_their_blank_line(head: bytes) -> None:
    assert head_end(head + b"GET /next") == len(head)
    req = parse_request(head)
    assert (req.method, req.path) == ("GET", "/metrics")


@pytest.mark.parametrize("target", [b"/\x1b[2J", b"/a\x00b", b"/\x7f"])
def test_control_characters_in_the_target_are_a_bad_request(target: bytes) -> None:
    with pytest.raises(BadRequest) as e:
        parse_request(b"GET " + target + b" HTTP/1.1\r\n\r\n")
    assert b"visible ASCII" in e.value.response.body


def exchange(port: int, request: bytes, timeout_s: float = 5.0) -> tuple[bytes, float]:
    """Send `request`, read until the server closes or the first response ends."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data, time.monotonic() - t0


def test_live_bare_lf_request_is_answered_at_once(endpoint_cls: type[MetricsServer]) -> None:
    with server(endpoint_cls) as srv:
        data, elapsed = exchange(srv.port, b"GET /-/healthy HTTP/1.0\n\n")
    assert data.startswith(b"HTTP/1.1 200 "), data
    assert elapsed < 2, f"took {elapsed:.1f} s (the head deadline is 10 s)"


def test_live_conflicting_lengths_get_400(endpoint_cls: type[MetricsServer]) -> None:
    with server(endpoint_cls) as srv:
        data, _ = exchange(srv.port, b"GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n"
                           b"Content-Length: 5\r\n\r\n")  # fmt: skip
    assert data.startswith(b"HTTP/1.1 400 "), data


# -- logs ------------------------------------------------------------------------------------


def record(path: str) -> logging.LogRecord:
    r = logging.LogRecord("bubblewatch.http", logging.DEBUG, __file__, 1, "http request", (), None)
    r.kv = {"path": path, "status": 404}
    return r


@pytest.mark.parametrize("path", ["/\x1b[2J\x1b[31mred", "/a\x07b", "/\x9b31m", "/\x7f"])
def test_logged_values_carry_no_raw_control_characters(path: str) -> None:
    for fmt in (LogfmtFormatter(timestamps=False), JsonFormatter(timestamps=False)):
        line = fmt.format(record(path))
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in line), repr(line)


def test_logfmt_writes_control_characters_as_escapes() -> None:
    line = LogfmtFormatter(timestamps=False).format(record("/\x1b[2J\tx\ny"))
    assert line.endswith('path="/\\x1b[2J\\tx\\ny" status=404'), line


def test_live_request_with_an_escape_in_its_path_is_refused_and_logged_escaped(
    caplog: pytest.LogCaptureFixture, endpoint_cls: type[MetricsServer]
) -> None:
    with caplog.at_level(logging.DEBUG, logger="bubblewatch"), server(endpoint_cls) as srv:
        data, _ = exchange(srv.port, b"GET /\x1b[2J HTTP/1.1\r\nHost: x\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 400 "), data
    fmt = LogfmtFormatter(timestamps=False)
    for r in caplog.records:
        line = fmt.format(r)
        assert "\x1b" not in line, repr(line)


# -- any bytes as a request head --------------------------------------------------------------

HEAD_PARTS = [b"GET", b"HEAD", b"POST", b" ", b"/metrics", b"/\x1b", b"?a=1", b"HTTP/1.1",
              b"HTTP/1.0", b"HTTP/2", b"\r\n", b"\n", b"\r", b"Host: x", b"Content-Length: 0",
              b"Content-Length: 5", b"Transfer-Encoding: chunked", b": x", b"\x00", b"\xff",
              b"Connection: close", b" folded"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(HEAD_PARTS) | st.binary(max_size=8), max_size=24))
def test_any_head_is_a_request_or_a_bad_request(parts: list[bytes]) -> None:
    """head_end and parse_request give a Request or a BadRequest, nothing else, at once."""
    buf = b"".join(parts) + b"\r\n\r\n"
    t0 = time.monotonic()
    try:
        end = head_end(buf)
        if end < 0:  # only blank lines, which may come before a request: still waiting
            assert not buf.strip(b"\r\n")
            return
        assert 0 < end <= len(buf)
        req = parse_request(buf[:end])
    except BadRequest as e:
        assert 400 <= e.response.status.value < 600
    else:
        assert req.path.startswith("/") and req.version in ("HTTP/1.0", "HTTP/1.1")
        assert all(0x21 <= ord(c) <= 0x7E for c in req.path)
    assert time.monotonic() - t0 < 1.0


WEB_KEYS = {
    "tls_server_config": ["cert_file", "key_file", "client_auth_type", "client_ca_file",
                          "min_version", "max_version", "cipher_suites"],
    "http_server_config": ["headers", "http2"],
    "basic_auth_users": ["alice", "bob"],
}  # fmt: skip
WEB_VALUES = st.sampled_from(["TLS10", "TLS13", "TLS99", "NoClientCert", "nosniff", "deny",
                              "$2b$04$" + "a" * 53, "$2b$31$" + "a" * 53, "c.pem", "", "a\r\nb",
                              10**40, -1, True, None]) | st.text(max_size=8)  # fmt: skip
HEADER_MAPS = st.dictionaries(st.sampled_from([*ALLOWED_HEADERS, "Transfer-Encoding",
                                               "x-frame-options", "Bad Name", ""]),
                              WEB_VALUES, max_size=3)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_web_config_loads_or_names_what_is_wrong(data: st.DataObject) -> None:
    doc: dict[str, object] = {}
    for section in data.draw(st.lists(st.sampled_from(list(WEB_KEYS)), unique=True, max_size=3)):
        keys = data.draw(st.lists(st.sampled_from(WEB_KEYS[section]), unique=True, max_size=4))
        doc[section] = {k: data.draw(HEADER_MAPS if k == "headers" else WEB_VALUES) for k in keys}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "c.pem").write_text("not a certificate")
        p = Path(d) / "web.yml"
        p.write_text(json.dumps(doc))  # JSON is YAML
        try:
            settings_ = load_web_config(p)
        except ConfigError as e:
            assert e.path == str(p) and e.reason, str(e)
            return
    assert set(settings_.headers) <= set(ALLOWED_HEADERS)
