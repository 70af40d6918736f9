"""Prometheus history as a telemetry source: the GPU series users already scrape.

    rec = load_prometheus("http://prom:9090", "-1d", "now", None, selector='Hostname="gpu1"')

Reads dcgm-exporter, nvitop-exporter, nvidia_gpu_exporter and bubblewatch's
own series through the HTTP API. See docs/inputs.md for what each can show.
"""

from bubblewatch.sources.prometheus_history.client import PrometheusClient, redact_url
from bubblewatch.sources.prometheus_history.dialects import Dialect, SeriesSpec, dialects
from bubblewatch.sources.prometheus_history.fetch import FetchLimits, choose_step
from bubblewatch.sources.prometheus_history.load import (
    load_prometheus,
    normalize_selector,
    parse_time,
)
from bubblewatch.sources.prometheus_history.matrix import PrometheusError, RangeSeries

__all__ = [
    "Dialect",
    "FetchLimits",
    "PrometheusClient",
    "PrometheusError",
    "RangeSeries",
    "SeriesSpec",
    "choose_step",
    "dialects",
    "load_prometheus",
    "normalize_selector",
    "parse_time",
    "redact_url",
]
