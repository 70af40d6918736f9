"""The `web.listen_address` format (`HOST:PORT`, `:PORT`, `[v6]:PORT`) and the web defaults."""

from __future__ import annotations

DEFAULT_LISTEN_ADDRESS = ":9842"
DEFAULT_MAX_REQUESTS = 40  # as node_exporter's --web.max-requests


def parse_listen_address(addr: str) -> tuple[str, int]:
    """':9842' -> ('', 9842); '127.0.0.1:0'; '[::1]:9842' -> ('::1', 9842)."""
    host, sep, port_s = addr.rpartition(":")
    if not sep or not port_s.isdigit():
        raise ValueError(f"listen address must be HOST:PORT or :PORT, got {addr!r}")
    port = int(port_s)
    if port > 65535:
        raise ValueError(f"port must be 0..65535, got {port}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write IPv6 addresses in brackets, like [::1]:9842; got {addr!r}")
    return host, port
