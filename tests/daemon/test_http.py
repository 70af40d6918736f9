"""The HTTP endpoint over real sockets on 127.0.0.1: metrics, health, TLS, basic auth."""

from __future__ import annotations

import base64
import gzip
import shutil
import ssl
import subprocess
import textwrap
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from email.message import Message
from pathlib import Path

import bcrypt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bubblewatch.daemon.config.web import TlsConfig, WebSettings, load_web_config
from bubblewatch.daemon.config.yamlsrc import ConfigError
from bubblewatch.daemon.http.library import SERVER_ENV, UvicornMetricsServer, server_class
from bubblewatch.daemon.http.server import MetricsServer
from bubblewatch.sinks.prometheus import make_registry
from bubblewatch.sinks.snapshot import ExporterSnapshot, Health

PASSWORD = "correct horse battery staple"


def get(
    url: str,
    *,
    auth: tuple[str, str] | None = None,
    ctx: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Message, bytes]:
    """(status, headers, body); headers by case-insensitive name, as HTTP has them."""
    req = urllib.request.Request(url, headers=headers or {})
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read()


@pytest.fixture
def holder() -> Callable[[], ExporterSnapshot]:
    """What the daemon's `snapshot` gives each scrape: here always the same one."""
    snap = ExporterSnapshot(health=Health(last_sample_timestamp_s=1.7e9), version="9.9")
    return lambda: snap


@pytest.fixture
def server(holder, endpoint_cls) -> Iterator[tuple[MetricsServer, list[bool]]]:
    ready = [False]
    srv = endpoint_cls("127.0.0.1:0", make_registry(holder), ready=lambda: ready[0])
    srv.start()
    yield srv, ready
    srv.close()


def test_metrics_healthy_ready_and_404(server) -> None:
    srv, ready = server
    base = f"http://127.0.0.1:{srv.port}"
    status, headers, body = get(base + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert fams["bubblewatch_build_info"].samples[0].labels == {"version": "9.9"}
    assert fams["bubblewatch_last_sample_timestamp_seconds"].samples[0].value == 1.7e9
    assert get(base + "/-/healthy")[:3:2] == (200, b"Healthy\n")
    assert get(base + "/-/ready")[0] == 503
    ready[0] = True
    assert get(base + "/-/ready")[0] == 200
    assert get(base + "/nope")[0] == 404
    assert b"/metrics" in get(base + "/")[2]


def test_gzip_and_openmetrics_negotiation(server) -> None:
    srv, _ = server
    url = f"http://127.0.0.1:{srv.port}/metrics"
    status, headers, body = get(url, headers={"Accept-Encoding": "gzip"})
    assert status == 200
    assert headers["Content-Encoding"] == "gzip"
    assert b"bubblewatch_build_info" in gzip.decompress(body)
    _, headers, body = get(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def write_web_config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "web-config.yml"
    p.write_text(textwrap.dedent(text))
    return p


def test_basic_auth_good_and_bad(tmp_path, holder, endpoint_cls) -> None:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    cfg = load_web_config(
        write_web_config(
            tmp_path,
            f"""\
        basic_auth_users:
          prometheus: '{hashed}'
        http_server_config:
          headers: {{X-Content-Type-Options: nosniff}}
        """,
        )
    )
    srv = endpoint_cls("127.0.0.1:0", make_registry(holder), web=cfg)
    srv.start()
    try:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        status, headers, _ = get(url)
        assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="bubblewatch"'
        assert get(url, auth=("prometheus", "wrong"))[0] == 401
        assert get(url, auth=("nobody", PASSWORD))[0] == 401
        status, headers, body = get(url, auth=("prometheus", PASSWORD))
        assert status == 200 and b"bubblewatch_build_info" in body
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert get(url, auth=("prometheus", PASSWORD))[0] == 200  # cached verdict
        assert get(f"http://127.0.0.1:{srv.port}/-/healthy")[0] == 401
    finally:
        srv.close()


def make_cert(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed: cannot make a self-signed certificate")
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


def test_tls_scrape_and_plain_http_refused(tmp_path, holder, endpoint_cls) -> None:
    cert, _key = make_cert(tmp_path)
    cfg = load_web_config(
        write_web_config(
            tmp_path,
            """\
        tls_server_config:
          cert_file: server.crt
          key_file: server.key
          min_version: TLS12
        """,
        )
    )
    srv = endpoint_cls("127.0.0.1:0", make_registry(holder), web=cfg, request_timeout_s=2)
    srv.start()
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        status, _, body = get(f"https://127.0.0.1:{srv.port}/metrics", ctx=ctx)
        assert status == 200 and b"bubblewatch_build_info" in body
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            get(f"http://127.0.0.1:{srv.port}/metrics")
        assert get(f"https://127.0.0.1:{srv.port}/-/healthy", ctx=ctx)[0] == 200  # still serving
    finally:
        srv.close()


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [
        ("basic_auth_users:\n  bob: plaintext\n", 2, "basic_auth_users.bob", "bcrypt hash"),
        ("tls_server_config:\n  key_file: k\n", 2, "tls_server_config.cert_file", "required"),
        (
            "tls_server_config:\n  cert_file: nope.crt\n",
            2,
            "tls_server_config.cert_file",
            "no such file",
        ),
        (
            "tls_server_config:\n  cipher_suites: [x]\n",
            2,
            "tls_server_config.cipher_suites",
            "not supported",
        ),
        ("http_server_config:\n  http2: true\n", 2, "http_server_config.http2", "not supported"),
        ("basic_auth: {}\n", 1, "basic_auth", "unknown key"),
    ],
)
def test_web_config_errors(tmp_path, text, line, field, reason) -> None:
    p = write_web_config(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_web_config(p)
    assert (e.value.path, e.value.line, e.value.field) == (str(p), line, field)
    assert reason in e.value.reason


def test_web_config_bad_key_material_names_the_file(tmp_path) -> None:
    (tmp_path / "c.crt").write_text("not a cert")
    (tmp_path / "k.key").write_text("not a key")
    p = write_web_config(tmp_path, "tls_server_config: {cert_file: c.crt, key_file: k.key}\n")
    with pytest.raises(ConfigError, match="cannot load certificate/key") as e:
        load_web_config(p)
    assert e.value.path.endswith("c.crt")


def test_the_environment_selects_the_endpoint() -> None:
    assert server_class({}) is MetricsServer
    assert server_class({SERVER_ENV: "builtin"}) is MetricsServer
    assert server_class({SERVER_ENV: "uvicorn"}) is UvicornMetricsServer
    with pytest.raises(ValueError, match="must be one of builtin, uvicorn, got 'nginx'"):
        server_class({SERVER_ENV: "nginx"})


def test_a_reloaded_certificate_serves_new_connections(tmp_path, holder, endpoint_cls) -> None:
    """set_web (a reload) swaps the certificate for the next handshake, on either server."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first, second = make_cert(tmp_path / "a"), make_cert(tmp_path / "b")

    def web(cert_key: tuple[Path, Path]) -> WebSettings:
        return WebSettings(tls=TlsConfig(*cert_key))

    srv = endpoint_cls("127.0.0.1:0", make_registry(holder), web=web(first))
    srv.start()

    def served_by(cert: Path) -> bool:
        ctx = ssl.create_default_context(cafile=str(cert))
        try:
            return get(f"https://127.0.0.1:{srv.port}/-/healthy", ctx=ctx)[0] == 200
        except urllib.error.URLError:  # the certificate is not the one `ctx` trusts
            return False

    try:
        assert served_by(first[0]) and not served_by(second[0])
        srv.set_web(web(second))
        assert served_by(second[0]) and not served_by(first[0])
    finally:
        srv.close()
