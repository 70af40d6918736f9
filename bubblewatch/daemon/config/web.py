"""TLS and basic auth for the HTTP endpoint, from an exporter-toolkit `web-config.yml`.

Same file shape as Prometheus exporters (prometheus/exporter-toolkit):

    tls_server_config:
      cert_file: server.crt          # relative paths: relative to this file
      key_file: server.key
      client_auth_type: NoClientCert # or RequireAndVerifyClientCert, VerifyClientCertIfGiven
      client_ca_file: ca.crt
      min_version: TLS12             # TLS10..TLS13
    http_server_config:
      headers: {X-Frame-Options: deny}
    basic_auth_users:
      alice: $2y$10$...              # bcrypt hash (htpasswd -nBC 10 alice)

Options of exporter-toolkit that Python's ssl module cannot honour
(cipher_suites, curve_preferences, http2, ...) are rejected, not ignored.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt

from bubblewatch.daemon.config.yamlsrc import ConfigError, Section, load_yaml, user_path
from bubblewatch.sinks.alerts.target import ReceiverFieldError, check_headers

_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_UNSUPPORTED = ("cipher_suites", "curve_preferences", "prefer_server_cipher_suites")
# The headers exporter-toolkit lets a web config add, and the values it allows where
# they are an enumeration (its validateHeaderConfig; names and values exact). Any
# other header could break every response (`Transfer-Encoding: chunked` did).
ALLOWED_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Content-Security-Policy": None,
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
}
# bcrypt doubles its work per cost step: 10 takes ~60 ms, 14 about 1 s per check; more
# would let each scrape hold a worker for many seconds.
BCRYPT_MAX_COST = 14
_BCRYPT_RE = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")


@dataclass(frozen=True)
class TlsConfig:
    cert_file: Path
    key_file: Path
    client_auth: ssl.VerifyMode = ssl.CERT_NONE
    client_ca_file: Path | None = None
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion | None = None

    def context(self) -> ssl.SSLContext:
        """A server-side SSLContext; errors name the file that failed."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = self.min_version
        if self.max_version is not None:
            ctx.maximum_version = self.max_version
        try:
            ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(
                f"cannot load certificate/key: {e}", path=str(self.cert_file)
            ) from None
        ctx.verify_mode = self.client_auth
        if self.client_ca_file is not None:
            try:
                ctx.load_verify_locations(str(self.client_ca_file))
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(
                    f"cannot load client CA: {e}", path=str(self.client_ca_file)
                ) from None
        return ctx


@dataclass(frozen=True)
class WebSettings:
    """What the HTTP server needs: an optional TLS context, users, and extra headers."""

    tls: TlsConfig | None = None
    users: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict)
    source: str = ""

    @property
    def auth_required(self) -> bool:
        return bool(self.users)


def bcrypt_cost(hashed: bytes) -> int:
    """The cost factor of a bcrypt hash ($2b$<cost>$...)."""
    return int(hashed[4:6])


class BasicAuth:
    """Checks user/password against bcrypt hashes, caching verdicts (bcrypt is slow on purpose).

    An unknown user is checked against a real bcrypt hash of the highest cost
    among the users, made at load: a wrong name costs as long as a wrong
    password, so answers do not tell which names exist. (A hash that bcrypt
    refuses fails in microseconds.)
    """

    def __init__(self, users: Mapping[str, bytes], cache_size: int = 256) -> None:
        self._users = dict(users)
        self._cache: dict[bytes, bool] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._dummy = b""
        if self._users:
            cost = max(bcrypt_cost(h) for h in self._users.values())
            self._dummy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(cost))

    def check(self, user: str, password: str) -> bool:
        hashed = self._users.get(user)
        key = hashlib.sha256(
            user.encode() + b"\0" + password.encode() + b"\0" + (hashed or b"")
        ).digest()
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        try:
            ok = bcrypt.checkpw(password.encode(), hashed or self._dummy) and hashed is not None
        except ValueError:
            ok = False
        with self._lock:
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            self._cache[key] = ok
        return ok


def _check_allowed(sec: Section, headers: Mapping[str, str]) -> None:
    """Only the headers (and values) exporter-toolkit allows; ConfigError naming the key."""
    for name, value in headers.items():
        if name not in ALLOWED_HEADERS:
            raise sec.error(
                name,
                f"HTTP header {name!r} cannot be configured (exporter-toolkit allows "
                f"{', '.join(ALLOWED_HEADERS)})",
            )
        values = ALLOWED_HEADERS[name]
        if values is not None and value not in values:
            raise sec.error(name, f"must be one of {', '.join(values)}, got {value!r}")


def load_web_config(path: Path) -> WebSettings:
    """Parse and validate a web-config.yml; errors name the file, line and key."""
    root = load_yaml(path)
    base = path.parent

    def file_of(sec: Section, key: str, *, required: bool) -> Path | None:
        v = sec.opt_str(key)
        if not v:
            if required:
                raise sec.error(key, f"'{key}' is required when tls_server_config is set")
            return None
        p = user_path(sec, key, v)
        p = p if p.is_absolute() else base / p
        if not p.is_file():
            raise sec.error(key, f"no such file: {p}")
        return p

    tls: TlsConfig | None = None
    if "tls_server_config" in root:
        t = root.section("tls_server_config")
        for key in _UNSUPPORTED:
            if key in t:
                raise t.error(key, f"'{key}' is not supported by bubblewatch (Python's ssl)")
        cert = file_of(t, "cert_file", required=True) or Path()
        key_f = file_of(t, "key_file", required=True) or Path()
        auth = t.choice("client_auth_type", "NoClientCert", tuple(_CLIENT_AUTH))
        ca = file_of(t, "client_ca_file", required=False)
        if auth != "NoClientCert" and ca is None:
            raise t.error("client_ca_file", f"client_auth_type {auth} needs 'client_ca_file'")
        min_v = t.choice("min_version", "TLS12", tuple(_TLS_VERSIONS))
        max_raw = t.opt_str("max_version")
        if max_raw is not None and max_raw not in _TLS_VERSIONS:
            raise t.error("max_version", f"must be one of {', '.join(_TLS_VERSIONS)}")
        if max_raw is not None and _TLS_VERSIONS[max_raw] < _TLS_VERSIONS[min_v]:
            raise t.error(
                "max_version",
                f"{max_raw} is below min_version {min_v}: no TLS version would be left",
            )
        tls = TlsConfig(
            cert,
            key_f,
            _CLIENT_AUTH[auth],
            ca,
            _TLS_VERSIONS[min_v],
            None if max_raw is None else _TLS_VERSIONS[max_raw],
        )
        t.finish()
        tls.context()  # fail now, at load, on a bad cert or key

    headers: dict[str, str] = {}
    if "http_server_config" in root:
        h = root.section("http_server_config")
        if "http2" in h:
            raise h.error("http2", "'http2' is not supported by bubblewatch (HTTP/1.1 only)")
        headers = h.str_map("headers")
        try:
            check_headers(headers)  # a CR/LF in a value would split every response
        except ReceiverFieldError as e:
            raise h.section("headers").error(e.key or "", str(e)) from None
        _check_allowed(h.section("headers"), headers)
        h.finish()

    users: dict[str, bytes] = {}
    if "basic_auth_users" in root:
        u = root.section("basic_auth_users")
        for name in u.names():
            hashed = u.str_(name, "")
            m = _BCRYPT_RE.match(hashed)
            if m is None:
                raise u.error(name, "must be a bcrypt hash ($2y$..., 60 characters)")
            if not 4 <= int(m.group(1)) <= BCRYPT_MAX_COST:
                raise u.error(name, f"bcrypt cost must be 4..{BCRYPT_MAX_COST}, got {m.group(1)}")
            users[name] = hashed.encode()
        u.finish()
    root.finish()
    return WebSettings(tls, users, headers, str(path))
