"""Where a serving engine publishes its Prometheus metrics, from its flags."""

from __future__ import annotations

import ipaddress

from bubblewatch.topology.engine import EngineConfig


def metrics_url(config: EngineConfig) -> str | None:
    """Where the engine serves Prometheus metrics, or None if it does not."""
    if config.port is None:
        return None
    if config.name == "sglang" and not config.metrics_enabled:
        return None
    if config.name not in ("sglang", "vllm"):
        return None
    return f"http://{_connect_host(config.host)}:{config.port}/metrics"


def _connect_host(host: str | None) -> str:
    """A host to connect to for a server bound to `host` (wildcards mean loopback)."""
    if not host or host in ("0.0.0.0", "*"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host
