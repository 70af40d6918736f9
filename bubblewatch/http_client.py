"""One policy for every outbound HTTP request: alert receivers, Prometheus, engine endpoints.

`request(method, url, ...)` sends one request on the standard library and
returns the `Answer` (status, headers, body). What it guarantees, whoever
calls it:

- **No redirect is followed.** A 3xx is an answer like any other; the caller
  says what it means. Headers (credentials) reach the URL's own origin and
  nowhere else (and, with `proxy`, the proxy that carries them there).
- **One total deadline**, `timeout_s`, from the connect to the last byte:
  every socket operation waits only for what is left of it, so a peer
  trickling a byte every 2 s cannot hold a 10 s request for minutes.
- **A bounded answer**: a 2xx body over `max_bytes` (announced or read) is an
  error; the body of any other status is read up to `max_bytes` and cut there
  (it only explains the status).
- **Every failure is an `HttpError`** with a `reason`: 'timeout',
  'connection' (refused, reset, DNS, TLS, closed before an answer),
  'protocol' (not HTTP: an SSH banner, garbage, HTTP/0.9, an over-long line,
  over 100 headers), 'incomplete' (the body ended before its length or last
  chunk), 'too_large', 'internal' (a URL it cannot send to). Its message
  never contains the URL (which may hold credentials).

- **Abortable from another thread**: pass an `Abort` and call its `abort()`
  from any thread; the request's socket is shut down there and then, which
  wakes a connect, a send or a receive blocked in the requesting thread (a
  receiver that accepts and never answers, a host that never completes the
  handshake), and the request fails at once with reason 'aborted'; so does
  one waiting for a name lookup.
- **The name lookup is bounded too** (name_lookup.py): a host name is looked
  up on a helper thread, and the request waits for it only until the
  deadline ('timeout') or an abort; a dead resolver holds one thread per name.

A 2xx answer is returned only when complete. `env_proxy(url)` is the proxy
the environment (`https_proxy`, `http_proxy`, `no_proxy`) names for a URL,
for the clients that honour one (the Prometheus client); only `http://`
proxies are supported (HTTPS through a CONNECT tunnel).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import io
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from bubblewatch.errors import UnavailableError
from bubblewatch.name_lookup import resolve

__all__ = ["REASONS", "Abort", "Answer", "HttpError", "env_proxy", "request"]

REASONS = ("timeout", "connection", "protocol", "incomplete", "too_large", "internal", "aborted")


class HttpError(UnavailableError):
    """A request that got no usable answer; `reason` is one of `REASONS`. No URL in the text.

    `cause`: the name of the exception it was made from ('IncompleteRead',
    'BadStatusLine', ...), or ''.
    """

    def __init__(self, reason: str, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.cause = cause


class Abort:
    """Lets another thread end the request in flight at once; once aborted, for good.

    The request hands each socket it opens to the handle before connecting;
    the handle keeps a duplicate of it (its own file descriptor, closed only
    under the handle's lock), so `abort()` shuts the connection down even
    while TLS takes the socket over, and never touches a reused descriptor.
    One request at a time per handle; every request given it after `abort()`
    fails at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dup: socket.socket | None = None
        self._aborted = False
        self._woken = threading.Event()  # set by abort(): ends a wait for a name lookup

    @property
    def aborted(self) -> bool:
        return self._aborted

    def abort(self) -> None:
        """Fail the request in flight now (and every later one); safe from any thread."""
        with self._lock:
            self._aborted = True
            self._woken.set()
            if self._dup is not None:
                with contextlib.suppress(OSError):  # not connected yet, or closed by the peer
                    self._dup.shutdown(socket.SHUT_RDWR)

    def _attach(self, sock: socket.socket) -> None:
        with self._lock:
            if self._aborted:
                raise HttpError("aborted", "the request was aborted")
            self._dup = sock.dup()

    def _detach(self) -> None:
        with self._lock:
            if self._dup is not None:
                self._dup.close()
                self._dup = None


@dataclass(frozen=True)
class Answer:
    """A complete answer (for a 2xx); `body` cut at `max_bytes` for any other status."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes


def request(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout_s: float,
    max_bytes: int,
    ssl_context: ssl.SSLContext | None = None,
    proxy: str | None = None,
    abort: Abort | None = None,
) -> Answer:
    """Send one request under the policy above; raises HttpError."""
    handle = abort or Abort()
    deadline = time.monotonic() + timeout_s

    def send() -> Answer:
        return _request(
            method,
            url,
            headers=headers or {},
            body=body,
            deadline=deadline,
            max_bytes=max_bytes,
            ssl_context=ssl_context,
            proxy=proxy,
            abort=handle,
        )

    try:
        return _translated(send, timeout_s)
    except HttpError as e:
        if handle.aborted and e.reason != "aborted":  # whatever the shut socket made of it
            raise HttpError("aborted", "the request was aborted") from None
        raise


def _translated(send: Callable[[], Answer], timeout_s: float) -> Answer:
    """`send()` with every failure made an HttpError."""
    try:
        return send()
    except HttpError:
        raise
    except TimeoutError:
        raise HttpError("timeout", f"no complete answer within {timeout_s:g} s") from None
    except http.client.RemoteDisconnected:  # closed before a status line
        raise HttpError("connection", "closed without an answer") from None
    except http.client.IncompleteRead:
        raise HttpError("incomplete", "the answer ended early", "IncompleteRead") from None
    except http.client.HTTPException as e:
        name = type(e).__name__
        raise HttpError("protocol", f"not an HTTP answer ({name})", name) from None
    except OSError as e:  # refused, reset, DNS, TLS (ssl.SSLError is an OSError)
        raise HttpError("connection", _os_reason(e)) from None
    except (ValueError, UnicodeError) as e:  # a port out of range, a header http.client refuses
        raise HttpError("internal", f"cannot send this request ({type(e).__name__})") from None


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (None: connect directly)."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


class _DeadlineReader(io.RawIOBase):
    """Socket reads that all end by one monotonic deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        self._sock.settimeout(_left_s(self._deadline))
        return self._sock.recv_into(buffer)


class _DeadlineSocket:
    """What `http.client.HTTPResponse` reads an answer through."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._raw = _DeadlineReader(sock, deadline)

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(self._raw)


def _left_s(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def _request(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    body: bytes | None,
    deadline: float,
    max_bytes: int,
    ssl_context: ssl.SSLContext | None,
    proxy: str | None,
    abort: Abort,
) -> Answer:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError("internal", "not an http:// or https:// URL")
    host = parts.hostname
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    send_headers = dict(headers)
    via = urllib.parse.urlsplit(proxy) if proxy else None
    if via is not None and (via.scheme != "http" or not via.hostname):
        raise HttpError("internal", "only http:// proxies are supported")
    address = (via.hostname or "", via.port or 80) if via is not None else (host, port)
    sock = _connect(address, deadline, abort)
    try:
        if via is not None and https:
            _tunnel(sock, host, port, via, deadline)
        elif via is not None:
            target = urllib.parse.urlunsplit(parts._replace(fragment=""))  # absolute, to a proxy
            send_headers.update(_proxy_auth(via))
        if https:
            ctx = ssl_context or ssl.create_default_context()
            sock.settimeout(_left_s(deadline))
            sock = ctx.wrap_socket(sock, server_hostname=host)
        conn = http.client.HTTPConnection(host, port)  # formats the request; the socket is ours
        conn.sock = sock
        sock.settimeout(_left_s(deadline))
        conn.request(method, target, body=body, headers={**send_headers, "Connection": "close"})
        return _answer(sock, method, deadline, max_bytes)
    finally:
        abort._detach()
        sock.close()


def _connect(address: tuple[str, int], deadline: float, abort: Abort) -> socket.socket:
    """Connect to the first address of `address` that answers, all of them within the deadline,
    each socket handed to `abort` before it connects.

    `socket.create_connection` gives each resolved address the whole timeout
    (`localhost` is ::1 and 127.0.0.1: twice it). The name lookup shares the
    deadline (name_lookup.resolve).
    """
    error: OSError | None = None
    found = resolve(address, deadline, abort._woken)
    if found is None:
        raise HttpError("aborted", "the request was aborted")
    for family, kind, proto, _, addr in found:
        sock = socket.socket(family, kind, proto)
        try:
            abort._attach(sock)
            sock.settimeout(_left_s(deadline))
            sock.connect(addr)
            return sock
        except OSError as e:  # the next address, as create_connection does
            error = e
        except BaseException:
            abort._detach()
            sock.close()
            raise
        abort._detach()
        sock.close()
    raise error or OSError("the name has no address")


def _answer(sock: socket.socket, method: str, deadline: float, max_bytes: int) -> Answer:
    resp = http.client.HTTPResponse(_DeadlineSocket(sock, deadline), method=method)  # type: ignore[arg-type]
    resp.begin()
    status = int(resp.status)
    ok = 200 <= status < 300
    if ok and resp.length is not None and resp.length > max_bytes:
        raise HttpError(
            "too_large", f"answer larger than {max_bytes} bytes (Content-Length: {resp.length})"
        )
    try:
        data = resp.read(max_bytes + 1)
    except http.client.IncompleteRead as e:
        if ok:
            raise
        data = e.partial  # the body of an error only explains it
    if ok and len(data) > max_bytes:
        raise HttpError("too_large", f"answer larger than {max_bytes} bytes")
    if ok and resp.length:  # Content-Length not reached: the peer closed early
        raise http.client.IncompleteRead(data, resp.length)
    return Answer(status, str(resp.reason), dict(resp.headers.items()), data[:max_bytes])


def _tunnel(
    sock: socket.socket,
    host: str,
    port: int,
    via: urllib.parse.SplitResult,
    deadline: float,
) -> None:
    """CONNECT host:port through the proxy on `sock` (the TLS handshake follows, end to end)."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{k}: {v}" for k, v in _proxy_auth(via).items()]
    sock.settimeout(_left_s(deadline))
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    resp = http.client.HTTPResponse(_DeadlineSocket(sock, deadline), method="CONNECT")  # type: ignore[arg-type]
    resp.begin()
    if resp.status != 200:
        raise HttpError("connection", f"the proxy refused the tunnel (HTTP {resp.status})")


def _proxy_auth(via: urllib.parse.SplitResult) -> dict[str, str]:
    if via.username is None:
        return {}
    user = urllib.parse.unquote(via.username)
    password = urllib.parse.unquote(via.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Proxy-Authorization": f"Basic {token}"}


def _os_reason(e: OSError) -> str:
    """Exception text without URLs (an OSError names the errno, not the URL)."""
    if e.strerror:
        return f"{type(e).__name__}: {e.strerror}"
    return type(e).__name__
