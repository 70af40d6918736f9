"""Prometheus exporter: a custom collector that renders an `ExporterSnapshot`.

Every exported metric is declared once, as data, in `SPECS`: its name, type,
help, labels and a function from the snapshot to (label values, value) rows.
Naming follows Prometheus's conventions: `bubblewatch_` prefix, base units, ratios
0..1, counters `_total`, identity on `_info` series. docs/daemon.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from bubblewatch.detect.types import Verdict
from bubblewatch.model.exported import GPU_INFO, GPU_METRICS, ExportedGpuMetric
from bubblewatch.model.metrics import CLOCKS_EVENT_NAMES
from bubblewatch.model.metrics import Metric as Telemetry
from bubblewatch.sinks._training_metrics import (
    TRAINING_INFO_LABELS,
    expected_bubble,
    training_info,
)
from bubblewatch.sinks.snapshot import ExporterSnapshot

Row = tuple[tuple[str, ...], float]
Rows = Callable[[ExporterSnapshot], Iterable[Row]]


@dataclass(frozen=True)
class MetricDef:
    """One exported metric family."""

    name: str
    kind: Literal["gauge", "counter"]
    help: str
    labels: tuple[str, ...]
    rows: Rows


def _gpu_rows(spec: ExportedGpuMetric) -> Rows:
    def rows(s: ExporterSnapshot) -> Iterator[Row]:
        for g in s.gpus:
            v = g.values.get(spec.telemetry)
            if v is not None:
                yield (str(g.info.index),), v * spec.scale

    return rows


def _gpu_info(s: ExporterSnapshot) -> Iterator[Row]:
    for g in s.gpus:
        i = g.info
        stage = "" if g.stage is None else str(g.stage)
        yield (str(i.index), i.uuid, i.name, i.pci_bus_id, g.pipeline, stage), 1.0


def _gpu_power_limit(s: ExporterSnapshot) -> Iterator[Row]:
    for g in s.gpus:
        if g.info.power_limit_w is not None:
            yield (str(g.info.index),), g.info.power_limit_w


def _clocks_event(s: ExporterSnapshot) -> Iterator[Row]:
    for g in s.gpus:
        bits = g.values.get(Telemetry.CLOCKS_EVENT_REASONS)
        if bits is None:
            continue
        for bit, name in sorted(CLOCKS_EVENT_NAMES.items()):
            yield (str(g.info.index), name), 1.0 if int(bits) & bit else 0.0


def _stage_rows(field: Literal["occupancy_ratio", "lag_s", "step_busy_s"]) -> Rows:
    def rows(s: ExporterSnapshot) -> Iterator[Row]:
        for p in s.pipelines:
            for st in p.stages:
                v = getattr(st, field)
                if v is not None:
                    yield (p.pipeline, str(st.stage)), v

    return rows


def _per_pipeline(items: Callable[[ExporterSnapshot], Iterable[Any]], field: str) -> Rows:
    """A row per item that knows its `field`, labelled by the item's pipeline (a bool as 1 or 0)."""

    def rows(s: ExporterSnapshot) -> Iterator[Row]:
        for x in items(s):
            v = getattr(x, field)
            if v is not None:
                yield (x.pipeline,), float(v)

    return rows


def _pipeline_rows(field: str) -> Rows:
    return _per_pipeline(attrgetter("pipelines"), field)


def _change_rows(field: str) -> Rows:
    return _per_pipeline(attrgetter("changes"), field)


def _engine_load(field: Literal["running", "queued"]) -> Rows:
    return _per_pipeline(attrgetter("engine_loads"), field)


def _verdict(s: ExporterSnapshot) -> Iterator[Row]:
    for p in s.pipelines:
        for v in Verdict:
            yield (p.pipeline, v.value), 1.0 if p.verdict is v else 0.0


def _pipeline_info(s: ExporterSnapshot) -> Iterator[Row]:
    for p in s.pipelines:
        yield (p.pipeline, str(p.pp_size), str(p.tp_size), p.interconnect), 1.0


def _engine_info(s: ExporterSnapshot) -> Iterator[Row]:
    # Parsed settings only: never argv, env or flags (they may carry API keys).
    for p in s.pipelines:
        e = p.engine
        if e is None:
            continue
        depth = "" if e.pp_async_batch_depth is None else str(e.pp_async_batch_depth)
        mbs = "" if e.pp_max_micro_batch_size is None else str(e.pp_max_micro_batch_size)
        yield (
            p.pipeline, e.name, e.version or "", str(e.pp_size), str(e.tp_size), str(e.ep_size),
            "true" if e.cuda_graph else "false", depth, mbs,
        ), 1.0  # fmt: skip


def _engine_settings(s: ExporterSnapshot) -> Iterator[Row]:
    for e in s.engine_settings:
        yield (e.pipeline, e.setting, e.source), e.value


def _live_changes(s: ExporterSnapshot) -> Iterator[Row]:
    for c in s.live_changes:
        yield (c.pipeline, c.setting, c.result), float(c.count)


def _change_time(s: ExporterSnapshot) -> Iterator[Row]:
    for c in s.changes:
        yield (c.pipeline,), c.changed_at_s


def _recommendations(s: ExporterSnapshot) -> Iterator[Row]:
    for r in s.recommendations:
        yield (r.pipeline, r.rule, r.severity), 1.0


def _health(field: str, scale: float = 1.0) -> Rows:
    def rows(s: ExporterSnapshot) -> Iterator[Row]:
        v = getattr(s.health, field)
        if v is not None:
            yield (), float(v) * scale

    return rows


def _sampling_interval(s: ExporterSnapshot) -> Iterator[Row]:
    if s.health.sampling_interval_s is not None:
        yield (s.health.sampling_interval_reason,), s.health.sampling_interval_s


def _config_reloads(s: ExporterSnapshot) -> Iterator[Row]:
    for result, n in s.health.config_reloads.items():
        yield (result,), float(n)


def _restart_required(s: ExporterSnapshot) -> Iterator[Row]:
    for key in s.health.config_restart_required:
        yield (key,), 1.0


def _nvml_errors(s: ExporterSnapshot) -> Iterator[Row]:
    for (call, code), n in sorted(s.health.nvml_errors.items()):
        yield (call, code), float(n)


def _receiver_counts(field: str) -> Rows:
    """Rows of a per-receiver dict of counts (`deliveries` by outcome, `failures` by reason)."""

    def rows(s: ExporterSnapshot) -> Iterator[Row]:
        for r in s.receivers:
            for label, n in sorted(getattr(r, field).items()):
                yield (r.receiver, label), float(n)

    return rows


def _receiver_rows(field: str) -> Rows:
    def rows(s: ExporterSnapshot) -> Iterator[Row]:
        for r in s.receivers:
            yield (r.receiver,), float(getattr(r, field))

    return rows


def _build_info(s: ExporterSnapshot) -> Iterator[Row]:
    yield (s.version,), 1.0


_P = ("pipeline",)

SPECS: tuple[MetricDef, ...] = (
    MetricDef("bubblewatch_build_info", "gauge", "Version of bubblewatch, value 1.",
              ("version",), _build_info),
    MetricDef(GPU_INFO, "gauge",
              "GPU identity and its place in a pipeline, value 1.",
              ("gpu", "uuid", "name", "pci_bus_id", "pipeline", "stage"), _gpu_info),
    MetricDef("bubblewatch_gpu_power_limit_watts", "gauge", "Enforced board power limit.",
              ("gpu",), _gpu_power_limit),
    *(MetricDef(m.name, m.kind, m.help, ("gpu",), _gpu_rows(m)) for m in GPU_METRICS),
    MetricDef("bubblewatch_gpu_clocks_event_reason", "gauge",
              "1 when the clocks event (throttle) reason is active, else 0.",
              ("gpu", "reason"), _clocks_event),
    MetricDef("bubblewatch_pipeline_info", "gauge", "Pipeline shape, value 1.",
              ("pipeline", "pp_size", "tp_size", "interconnect"), _pipeline_info),
    MetricDef("bubblewatch_engine_info", "gauge",
              "Serving engine settings that shape the pipeline, value 1 (never argv or secrets).",
              ("pipeline", "engine", "version", "pp_size", "tp_size", "ep_size", "cuda_graph",
               "pp_async_batch_depth", "pp_max_micro_batch_size"), _engine_info),
    MetricDef("bubblewatch_training_info", "gauge",
              "Training job layout (framework, parallel sizes, batch, schedule), value 1.",
              TRAINING_INFO_LABELS, training_info),
    MetricDef("bubblewatch_pipeline_expected_bubble_ratio", "gauge",
              "Bubble the training schedule allows: (p-1)/(m+p-1), (p-1)/(v*m+p-1), "
              "0 for zero-bubble schedules.",
              ("pipeline",), expected_bubble),
    MetricDef("bubblewatch_pipeline_measured_bubble_ratio", "gauge",
              "Training pipeline judged against its schedule: share of stage-time not doing "
              "useful work (compare bubblewatch_pipeline_expected_bubble_ratio).",
              _P, _pipeline_rows("measured_bubble_ratio")),
    MetricDef("bubblewatch_pipeline_step_period_seconds", "gauge",
              "Training step period found in the stages' activity.",
              _P, _pipeline_rows("step_period_s")),
    MetricDef("bubblewatch_stage_step_busy_seconds", "gauge",
              "Seconds of useful work the stage does per training step.",
              ("pipeline", "stage"), _stage_rows("step_busy_s")),
    MetricDef("bubblewatch_stage_occupancy_ratio", "gauge",
              "Share of the window the stage did useful work.",
              ("pipeline", "stage"), _stage_rows("occupancy_ratio")),
    MetricDef("bubblewatch_stage_lag_seconds", "gauge",
              "Delay of load changes reaching this stage after stage 0.",
              ("pipeline", "stage"), _stage_rows("lag_s")),
    MetricDef("bubblewatch_pipeline_concurrency", "gauge",
              "Effective micro-batches in flight: sum of stage occupancies.",
              _P, _pipeline_rows("concurrency")),
    MetricDef("bubblewatch_pipeline_bubble_ratio", "gauge",
              "Share of stage time lost to bubbles: 1 - concurrency / pp_size.",
              _P, _pipeline_rows("bubble_ratio")),
    MetricDef("bubblewatch_pipeline_verdict", "gauge",
              "1 for the pipeline's current verdict, 0 for the others.",
              ("pipeline", "verdict"), _verdict),
    MetricDef("bubblewatch_pipeline_verdict_confidence", "gauge",
              "Confidence of the current verdict, 0..1.", _P, _pipeline_rows("confidence")),
    MetricDef("bubblewatch_pipeline_bubble_energy_joules_total", "counter",
              "Energy above idle spent while stages waited in bubbles.",
              _P, _pipeline_rows("bubble_energy_joules_total")),
    MetricDef("bubblewatch_pipeline_load_limited", "gauge",
              "1 when a serialized pipeline has too little work to fill it (inherent), "
              "0 when it is serialized under load; absent when unknown.",
              _P, _pipeline_rows("load_limited")),
    MetricDef("bubblewatch_engine_running_requests", "gauge",
              "Requests the serving engine is running now (from its metrics endpoint; SGLang "
              "with PP counts one micro-batch, a lower bound).",
              _P, _engine_load("running")),
    MetricDef("bubblewatch_engine_queued_requests", "gauge",
              "Requests waiting in the serving engine's queue now.",
              _P, _engine_load("queued")),
    MetricDef("bubblewatch_engine_setting", "gauge",
              "An engine setting the rules see now, by where it came from: live (read back "
              "from the engine) or cmdline (its command line and defaults).",
              ("pipeline", "setting", "source"), _engine_settings),
    MetricDef("bubblewatch_engine_live_changes_total", "counter",
              "Engine settings changed live (without a restart), by whether they took.",
              ("pipeline", "setting", "result"), _live_changes),
    MetricDef("bubblewatch_pipeline_change_concurrency_ratio", "gauge",
              "Concurrency after the last engine restart with new settings over before it.",
              _P, _change_rows("concurrency_ratio")),
    MetricDef("bubblewatch_pipeline_change_borne_out", "gauge",
              "1 when the last engine settings change did what the diagnosis before it "
              "predicted, 0 when not; absent when it could not be judged.",
              _P, _change_rows("borne_out")),
    MetricDef("bubblewatch_pipeline_change_timestamp_seconds", "gauge",
              "Unix time the last judged engine settings change was noticed.",
              _P, _change_time),
    MetricDef("bubblewatch_recommendation_active", "gauge",
              "1 for each recommendation rule firing now.",
              ("pipeline", "rule", "severity"), _recommendations),
    MetricDef("bubblewatch_last_sample_timestamp_seconds", "gauge",
              "Unix time of the last successful sample.", (),
              _health("last_sample_timestamp_s")),
    MetricDef("bubblewatch_sampling_duration_seconds", "gauge",
              "Time the last sampling pass took.", (), _health("sampling_duration_s")),
    MetricDef("bubblewatch_sampling_interval_seconds", "gauge",
              "Time between GPU samples in force; reason: configured (sampling.interval set), "
              "default, or training (a training pipeline found: the faster default).",
              ("reason",), _sampling_interval),
    MetricDef("bubblewatch_samples_total", "counter", "GPU samples taken.", (),
              _health("samples_total")),
    MetricDef("bubblewatch_nvml_errors_total", "counter", "NVML call failures.",
              ("call", "code"), _nvml_errors),
    MetricDef("bubblewatch_analysis_duration_seconds", "gauge",
              "Time the last diagnosis and rules pass took.", (),
              _health("analysis_duration_s")),
    MetricDef("bubblewatch_config_last_reload_successful", "gauge",
              "1 if the last configuration (re)load succeeded.", (),
              _health("config_reload_ok")),
    MetricDef("bubblewatch_config_last_reload_success_timestamp_seconds", "gauge",
              "Unix time of the last successful configuration load.", (),
              _health("config_reload_timestamp_s")),
    MetricDef("bubblewatch_config_reloads_total", "counter",
              "Configuration reloads (SIGHUP) by result: applied, refused (the files loaded and "
              "the rest applied, but a setting they change needs a restart), invalid (a file did "
              "not load: nothing changed).",
              ("result",), _config_reloads),
    MetricDef("bubblewatch_config_restart_required", "gauge",
              "1 for each setting the configuration files change that keeps its old value "
              "until a restart (web.listen_address, web.telemetry_path, web.max_requests, "
              "record, simulate); absent when every setting is in force.",
              ("setting",), _restart_required),
    MetricDef("bubblewatch_webhook_deliveries_total", "counter",
              "Alert delivery attempts by receiver and outcome.",
              ("receiver", "outcome"), _receiver_counts("deliveries")),
    MetricDef("bubblewatch_alert_delivery_failures_total", "counter",
              "Failed alert delivery attempts by receiver and reason (http_status, redirect, "
              "timeout, connection, protocol, incomplete, too_large, internal); retried but for a "
              "permanent 4xx (outcome rejected), which is dropped.",
              ("receiver", "reason"), _receiver_counts("failures")),
    MetricDef("bubblewatch_webhook_queue_length", "gauge",
              "Alerts waiting for delivery to the receiver.",
              ("receiver",), _receiver_rows("queue_length")),
    MetricDef("bubblewatch_alerts_dropped_total", "counter",
              "Alerts dropped: queue full (oldest first) or rejected by the receiver.",
              ("receiver",), _receiver_rows("dropped_total")),
    MetricDef("bubblewatch_alert_spool_errors_total", "counter",
              "Failed writes to the receiver's on-disk alert queue (full or broken disk); "
              "the alert is held in memory and written again later.",
              ("receiver",), _receiver_rows("spool_errors_total")),
    MetricDef("bubblewatch_alerts_held_in_memory", "gauge",
              "Alerts the receiver's on-disk queue refused (full disk), held in memory only: "
              "a kill now loses them for this receiver.",
              ("receiver",), _receiver_rows("held_in_memory")),
    MetricDef("bubblewatch_alert_state_saved", "gauge",
              "1 if the firing state on disk is current; 0 while its save fails (full disk): "
              "a kill now re-fires those alerts after restart, with a new starts_at.",
              (), lambda s: iter([((), float(s.alert_state_saved))])),
    MetricDef("bubblewatch_alert_worker_restarts_total", "counter",
              "Times a receiver's delivery thread had ended and was started again.",
              ("receiver",), _receiver_rows("worker_restarts_total")),
)  # fmt: skip


class SnapshotCollector(Collector):
    """Renders `SPECS` over the snapshot `source()` returns at scrape time."""

    def __init__(self, source: Callable[[], ExporterSnapshot]) -> None:
        self._source = source

    def describe(self) -> Iterable[Metric]:
        return [_family(spec) for spec in SPECS]

    def collect(self) -> Iterable[Metric]:
        snap = self._source()
        for spec in SPECS:
            family = _family(spec)
            for labels, value in spec.rows(snap):
                family.add_metric(list(labels), value)
            if family.samples:
                yield family


def _family(spec: MetricDef) -> GaugeMetricFamily | CounterMetricFamily:
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


def make_registry(source: Callable[[], ExporterSnapshot]) -> CollectorRegistry:
    """A registry with bubblewatch's collector and the standard `process_*` metrics."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(SnapshotCollector(source))
    ProcessCollector(registry=registry)
    return registry
