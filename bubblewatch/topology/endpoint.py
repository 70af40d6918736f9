"""Where a serving engine serves HTTP (metrics, version, live settings), from its flags."""

from __future__ import annotations

import ipaddress

from bubblewatch import engines
from bubblewatch.topology.engine_config import EngineConfig


def base_url(config: EngineConfig) -> str | None:
    """The engine's HTTP server (`http://host:port`), or None when it runs none."""
    if config.port is None or config.headless:
        return None
    return f"http://{_connect_host(config.host)}:{config.port}"


def metrics_url(config: EngineConfig) -> str | None:
    """Where the engine serves Prometheus load gauges, or None if it does not.

    SGLang only with `--enable-metrics`; vLLM unless `--headless` (no API server)
    or `--disable-log-stats` (no stat loggers, so no request gauges);
    TensorRT-LLM's `/metrics` answers JSON iteration stats (empty unless
    `enable_iter_perf_stats` is set in its `--extra_llm_api_options` file).
    """
    base = base_url(config)
    if base is None:
        return None
    engine = engines.get(config.name)
    if engine is None or engine.metrics.format == "none":
        return None
    if engine.metrics.served_by_default or config.metrics_enabled:
        return f"{base}/metrics"
    return None


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
