"""The trace recorder's state on /metrics: writing or stopped (a full disk), and what it dropped.

A full recording disk stops the recorder (`recorder.py`) and is logged once;
these say so to Prometheus too, for as long as it lasts.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bubblewatch.daemon.record.recorder import TraceRecorder

WRITING_METRIC = "bubblewatch_record_writing"
STOPS_METRIC = "bubblewatch_record_stops_total"
DROPPED_METRIC = "bubblewatch_record_dropped_records_total"
_HELP = {
    WRITING_METRIC: "1 while the trace recorder writes; 0 while a failed write (a full disk) "
    "has stopped it (it tries a new file every 10 s).",
    STOPS_METRIC: "Times a failed write (a full disk, a quota) stopped the trace recorder.",
    DROPPED_METRIC: "Records (samples, load, events) not recorded while the recorder was stopped.",
}


class RecordCollector(Collector):
    """Exports one recorder's state."""

    def __init__(self, recorder: TraceRecorder) -> None:
        self._recorder = recorder

    def describe(self) -> Iterable[Metric]:
        return [
            GaugeMetricFamily(WRITING_METRIC, _HELP[WRITING_METRIC]),
            CounterMetricFamily(STOPS_METRIC, _HELP[STOPS_METRIC]),
            CounterMetricFamily(DROPPED_METRIC, _HELP[DROPPED_METRIC]),
        ]

    def collect(self) -> Iterable[Metric]:
        r = self._recorder
        yield GaugeMetricFamily(
            WRITING_METRIC, _HELP[WRITING_METRIC], value=1.0 if r.writing else 0.0
        )
        yield CounterMetricFamily(STOPS_METRIC, _HELP[STOPS_METRIC], value=float(r.stats.stops))
        yield CounterMetricFamily(
            DROPPED_METRIC, _HELP[DROPPED_METRIC], value=float(r.stats.dropped_total)
        )
