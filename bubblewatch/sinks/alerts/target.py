"""Where a receiver's requests go: its URL and extra headers, checked once, at load.

A receiver that could never deliver is refused when the configuration is
read, naming the field, rather than failing every delivery at run time: a
header name that is not an HTTP token, a header value with CR, LF or another
control character (http.client refuses it; it would also split the request),
a URL that is not http(s) or has no host. `user:password@` in a URL becomes
an `Authorization: Basic` header (urllib would try to connect to a host
named "user:password@host"). Messages never quote the URL or a header value.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

from bubblewatch.errors import BubblewatchError

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class ReceiverFieldError(BubblewatchError, ValueError):
    """A receiver setting that can never work: `field` is its key, `key` a sub-key (a header)."""

    def __init__(self, field: str, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.key = key


def check_url(url: str, *, credentials_allowed: bool) -> None:
    """Raise ReceiverFieldError('url', ...) for a URL no request could be sent to."""
    if _CONTROL.search(url) or " " in url:
        raise ReceiverFieldError(
            "url", "receiver url must not contain spaces or control characters"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number)
    except ValueError:
        raise ReceiverFieldError("url", "receiver url is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise ReceiverFieldError("url", "receiver url must start with http:// or https://")
    if not parts.hostname:
        raise ReceiverFieldError("url", "receiver url has no host")
    if "@" in parts.netloc and not credentials_allowed:
        raise ReceiverFieldError(
            "url", "this receiver type takes no user:password@ in its url; remove them"
        )


def check_headers(headers: Mapping[str, str]) -> None:
    """Raise ReceiverFieldError('headers', ..., key=name) for a header no request may carry."""
    for name, value in headers.items():
        if not _TOKEN.match(name):
            raise ReceiverFieldError(
                "headers", f"header name {name!r} is not an HTTP token", key=name
            )
        if _CONTROL.search(value):
            raise ReceiverFieldError(
                "headers",
                f"the value of header {name!r} contains CR, LF or another control character",
                key=name,
            )


def split_credentials(url: str) -> tuple[str, str | None]:
    """The URL without `user:password@`, and the `Authorization` value they stand for."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return urlunsplit(parts._replace(netloc=hostport)), f"Basic {token}"
