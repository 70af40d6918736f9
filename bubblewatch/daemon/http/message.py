"""HTTP/1.1 messages for the metrics endpoint: parse a request head, encode a response.

Pure functions of bytes, no sockets. The endpoint serves GET and HEAD
without bodies, so a request is a request line plus headers (at most
MAX_HEAD_BYTES); anything else is answered with the right 4xx/5xx and
the connection closed.
"""

from __future__ import annotations

import email.utils
import http.client
import io
import re
from dataclasses import dataclass, field
from http import HTTPStatus

from bubblewatch.errors import BubblewatchError

MAX_HEAD_BYTES = 8192  # request line and headers (Go's net/http allows 1 MB; 8 KB is plenty)
# The blank line that ends a head: CRLF, or a bare LF as RFC 9112 (2.2) lets a server
# accept (Go's net/http does); without it a bare-LF request waited for the deadline.
_TERMINATORS = (b"\n\r\n", b"\n\n")
_VISIBLE = re.compile(r"[!-~]+")  # a request target: visible ASCII, no controls or spaces


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query string
    version: str  # "HTTP/1.0" or "HTTP/1.1"
    headers: http.client.HTTPMessage

    def header(self, name: str) -> str:
        return self.headers.get(name, "") or ""

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in self.header("Connection").split(",")}
        if self.version == "HTTP/1.1":
            return "close" not in tokens
        return "keep-alive" in tokens


@dataclass(frozen=True)
class Response:
    status: HTTPStatus
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False  # close the connection after this response

    def encode(self, *, head: bool, keep_alive: bool) -> bytes:
        """Status line, headers and body as one buffer: one write, no Nagle/delayed-ACK stall."""
        lines = [f"HTTP/1.1 {self.status.value} {self.status.phrase}"]
        headers = {
            "Date": email.utils.formatdate(usegmt=True),
            "Content-Type": "text/plain; charset=utf-8",
            **self.headers,
            "Content-Length": str(len(self.body)),
        }
        if not keep_alive or self.close:
            headers["Connection"] = "close"
        lines += [f"{k}: {v}" for k, v in headers.items()]
        out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return out if head else out + self.body


class BadRequest(BubblewatchError):
    """A request that gets an error response and a closed connection."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.response = Response(status, (message + "\n").encode(), close=True)


def head_end(buf: bytes | bytearray) -> int:
    """The length of the complete request head at the start of `buf`, or -1 if incomplete.

    Raises BadRequest (431) when no head ends within MAX_HEAD_BYTES.
    """
    start = len(buf) - len(buf.lstrip(b"\r\n"))  # blank lines before a request (RFC 9112, 2.2)
    ends = [
        i + len(t) for t in _TERMINATORS if (i := buf.find(t, start, MAX_HEAD_BYTES + start)) >= 0
    ]
    if not ends:
        if len(buf) - start >= MAX_HEAD_BYTES:
            raise BadRequest(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"request head larger than {MAX_HEAD_BYTES} bytes",
            )
        return -1
    return min(ends)


def parse_request(head: bytes) -> Request:
    """A complete request head (from `head_end`) as a Request, or BadRequest."""
    text = head.lstrip(b"\r\n")
    line, _, rest = text.partition(b"\n")
    try:
        method, target, version = line.removesuffix(b"\r").decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise BadRequest(HTTPStatus.BAD_REQUEST, "malformed request line") from None
    if _VISIBLE.fullmatch(target) is None:  # a control character would reach the logs
        raise BadRequest(HTTPStatus.BAD_REQUEST, "request target must be visible ASCII")
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "HTTP/1.0 and 1.1 only")
    try:
        headers = http.client.parse_headers(io.BytesIO(rest))
    except (http.client.HTTPException, UnicodeDecodeError):
        raise BadRequest(HTTPStatus.BAD_REQUEST, "malformed headers") from None
    if headers.defects:
        raise BadRequest(HTTPStatus.BAD_REQUEST, "malformed headers")
    lengths = {v.strip() for v in headers.get_all("Content-Length") or ()}
    if len(lengths) > 1:  # RFC 9112, 6.3: a message with differing lengths is invalid
        raise BadRequest(HTTPStatus.BAD_REQUEST, "conflicting Content-Length headers")
    if headers.get("Transfer-Encoding") or (lengths or {"0"}) != {"0"}:
        raise BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "requests with a body are not served")
    if not target.startswith("/"):
        raise BadRequest(HTTPStatus.BAD_REQUEST, "request target must be a path")
    return Request(method, target.split("?", 1)[0], version, headers)


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether `Accept-Encoding` allows gzip: listed (or `*`) with a q-value above 0."""
    q_gzip: float | None = None
    q_any: float | None = None
    for item in accept_encoding.split(","):
        name, _, params = item.strip().partition(";")
        q = 1.0
        for p in params.split(";"):
            k, _, v = p.strip().partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        name = name.strip().lower()
        if name in ("gzip", "x-gzip"):
            q_gzip = q
        elif name == "*":
            q_any = q
    chosen = q_gzip if q_gzip is not None else q_any
    return chosen is not None and chosen > 0
