"""Writes bubblewatch's Grafana dashboards (JSON models) from the definitions below.

The panels, queries and units are defined here as data (P, Q, Row); Grafana's
own Python SDK, grafana-foundation-sdk (the Grafana 10.4 build, Python 3.11 or
newer; in the `test` extra), turns them into the dashboard model and its JSON.
Run `python dashboards/build.py` after editing; `--check` exits 1 when the
committed JSON differs from what this script builds (tests/stack runs it).
Every query goes to the `${datasource}` template variable; no install's
datasource UID appears anywhere. Recording rules named `level:metric:ops`
come from rules/prometheus/bubblewatch.rules.yml.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import (
    common,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders import dashboard as board_builders
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39  # what Grafana 10.4 writes (the SDK model says 36 unless told)
DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
GRID_WIDTH = 24

Json = dict[str, Any]

# Verdict codes of the recording rule pipeline:bubblewatch_pipeline_verdict:code.
VERDICT_CODES: tuple[tuple[int, str, str], ...] = (
    (1, "healthy", "green"),
    (2, "serialized", "red"),
    (3, "launch_bound", "orange"),
    (4, "imbalanced", "yellow"),
    (5, "straggler", "purple"),
    (6, "idle", "blue"),
    (7, "not_pipeline", "text"),
    (8, "insufficient_data", "#808080"),
    (9, "collective_wait", "dark-red"),
    (10, "underfed", "light-orange"),
    (11, "below_schedule", "dark-yellow"),
)
VERDICT_MAPPING: Json = {
    "type": "value",
    "options": {
        str(code): {"text": name, "color": color, "index": i}
        for i, (code, name, color) in enumerate(VERDICT_CODES)
    },
}


@dataclass(frozen=True)
class Q:
    """One panel query."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass(frozen=True)
class P:
    """One panel: its kind, size (grid units) and what differs from the defaults."""

    kind: str
    title: str
    description: str
    queries: Sequence[Q]
    w: int = 12
    h: int = 8
    unit: str | None = None
    min: float | None = None
    max: float | None = None
    defaults: Json = field(default_factory=dict)
    overrides: Sequence[Json] = ()
    transformations: Sequence[Json] = ()


@dataclass(frozen=True)
class Row:
    title: str


def _targets(queries: Sequence[Q]) -> list[prometheus.Dataquery]:
    out = []
    for i, q in enumerate(queries):
        query = (
            prometheus.Dataquery()
            .datasource(DS)
            .expr(q.expr)
            .legend_format(q.legend or "__auto")
            .ref_id(chr(ord("A") + i))
            .format(PromQueryFormat.TABLE if q.table else PromQueryFormat.TIME_SERIES)
        )
        out.append(query.instant() if q.instant else query.range())
    return out


def _legend(mode: cm.LegendDisplayMode, where: cm.LegendPlacement) -> Any:
    return common.VizLegendOptions().display_mode(mode).placement(where).show_legend(True)


def _timeseries() -> Any:
    return (
        timeseries.Panel()
        .legend(
            _legend(cm.LegendDisplayMode.TABLE, cm.LegendPlacement.RIGHT).calcs(
                ["mean", "lastNotNull"]
            )
        )
        .tooltip(
            common.VizTooltipOptions()
            .mode(cm.TooltipDisplayMode.MULTI)
            .sort(cm.SortOrder.DESCENDING)
        )
        .draw_style(cm.GraphDrawStyle.LINE)
        .line_width(1)
        .fill_opacity(10)
        .show_points(cm.VisibilityMode.NEVER)
        .span_nulls(False)
    )


def _state_timeline() -> Any:
    return (
        statetimeline.Panel()
        .show_value(cm.VisibilityMode.NEVER)
        .merge_values(True)
        .row_height(0.85)
        .align_value(cm.TimelineValueAlignment.LEFT)
        .legend(_legend(cm.LegendDisplayMode.LIST, cm.LegendPlacement.BOTTOM))
        .tooltip(
            common.VizTooltipOptions().mode(cm.TooltipDisplayMode.SINGLE).sort(cm.SortOrder.NONE)
        )
        .fill_opacity(80)
        .line_width(0)
    )


def _stat() -> Any:
    return (
        stat.Panel()
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .justify_mode(cm.BigValueJustifyMode.AUTO)
        .orientation(cm.VizOrientation.AUTO)
        .text_mode(cm.BigValueTextMode.AUTO)
    )


def _table() -> Any:
    return (
        table.Panel()
        .show_header(True)
        .cell_height(cm.TableCellHeight.SM)
        .footer(common.TableFooterOptions().show(False))
    )


# Each panel kind with the options every panel of that kind shares.
_KINDS: dict[str, Callable[[], Any]] = {
    "timeseries": _timeseries,
    "state-timeline": _state_timeline,
    "stat": _stat,
    "table": _table,
}


def _thresholds(steps: Sequence[tuple[str, float | None]]) -> Any:
    return (
        board_builders.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for c, v in steps])
    )


def _value_map(raw: Json) -> dm.ValueMap:
    """A value mapping written as Grafana's JSON (VERDICT_MAPPING) as the SDK's model."""
    return dm.ValueMap({k: dm.ValueMappingResult(**v) for k, v in raw["options"].items()})


def _panel(p: P, pid: int, x: int, y: int) -> Any:
    panel = _KINDS[p.kind]().id(pid).title(p.title).description(p.description).datasource(DS)
    panel = panel.grid_pos(dm.GridPos(h=p.h, w=p.w, x=x, y=y))
    thresholded = p.kind in ("stat", "table")
    color = "thresholds" if thresholded else "palette-classic"
    color = p.defaults.get("color", {}).get("mode", color)
    panel = panel.color_scheme(board_builders.FieldColor().mode(dm.FieldColorModeId(color)))
    if thresholded:
        panel = panel.thresholds(_thresholds([("text", None)]))
    for value, setter in ((p.unit, panel.unit), (p.min, panel.min), (p.max, panel.max)):
        if value is not None:
            setter(value)
    if "thresholds" in p.defaults:
        steps = p.defaults["thresholds"]["steps"]
        panel = panel.thresholds(_thresholds([(t["color"], t["value"]) for t in steps]))
    if "mappings" in p.defaults:
        panel = panel.mappings([_value_map(m) for m in p.defaults["mappings"]])
    if "decimals" in p.defaults:
        panel = panel.decimals(p.defaults["decimals"])
    for target in _targets(p.queries):
        panel = panel.with_target(target)
    for override in p.overrides:
        matcher = dm.MatcherConfig(
            id_val=override["matcher"]["id"], options=override["matcher"]["options"]
        )
        props = [
            dm.DynamicConfigValue(id_val=q["id"], value=q["value"]) for q in override["properties"]
        ]
        panel = panel.with_override(matcher, props)
    for t in p.transformations:
        panel = panel.with_transformation(
            dm.DataTransformerConfig(id_val=t["id"], options=t["options"])
        )
    return panel


def _layout(board: Any, items: Sequence[P | Row]) -> None:
    """Places panels left to right, wrapping at the grid width; a Row starts a new line."""
    x = y = line_h = 0
    pid = 1
    for item in items:
        if isinstance(item, Row):
            y += line_h
            pos = dm.GridPos(h=1, w=GRID_WIDTH, x=0, y=y)
            board.with_row(board_builders.Row(item.title).id(pid).collapsed(False).grid_pos(pos))
            pid += 1
            x, y, line_h = 0, y + 1, 0
            continue
        if x + item.w > GRID_WIDTH:
            x, y, line_h = 0, y + line_h, 0
        board.with_panel(_panel(item, pid, x, y))
        pid += 1
        x += item.w
        line_h = max(line_h, item.h)


def _datasource_var() -> Any:
    return (
        board_builders.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .regex("")
        .hide(dm.VariableHide.DONT_HIDE)
    )


def _query_var(name: str, label: str, query: str, *, multi: bool) -> Any:
    return (
        board_builders.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query(query)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .include_all(multi)
        .multi(multi)
        .regex("")
        .hide(dm.VariableHide.DONT_HIDE)
    )


def _dashboard(uid: str, title: str, description: str, variables: list[Any],
               items: Sequence[P | Row]) -> Json:  # fmt: skip
    link = (
        board_builders.DashboardLink("bubblewatch")
        .type(dm.DashboardLinkType.DASHBOARDS)
        .tags(["bubblewatch"])
        .as_dropdown(True)
        .include_vars(True)
        .keep_time(True)
        .icon("external link")
        .target_blank(False)
        .tooltip("")
        .url("")
    )
    board = (
        board_builders.Dashboard(title)
        .uid(uid)
        .description(description)
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .link(link)
        .refresh("30s")
        .tags(["bubblewatch", "gpu", "pipeline-parallelism"])
        .time("now-3h", "now")
        .timezone("")
        .version(1)
        .week_start("")
        .variables(variables)
    )
    _layout(board, items)
    model = board.build()
    model.schema_version = SCHEMA_VERSION
    out: Json = json.loads(JSONEncoder().encode(model))
    return out


def _field_override(name: str, **props: Any) -> Json:
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [{"id": k.replace("_", "."), "value": v} for k, v in props.items()],
    }


def _hide_fields(*names: str, rename: dict[str, str] | None = None) -> Json:
    return {"id": "organize", "options": {"excludeByName": dict.fromkeys(names, True),
                                          "renameByName": rename or {}}}  # fmt: skip


# -- overview ---------------------------------------------------------------

OV = '{instance=~"$instance", pipeline=~"$pipeline"}'
DRILL_LINK = {
    "title": "Open pipeline ${__value.raw}",
    "url": "/d/bubblewatch-pipeline/bubblewatch-pipeline?var-pipeline=${__value.raw}"
           "&${datasource:queryparam}&${__url_time_range}",
}  # fmt: skip


def overview() -> Json:
    items: list[P | Row] = [
        P("table", "Pipelines",
          "Every pipeline with its verdict, confidence, bubble ratio, effective concurrency, "
          "stages seen and power burned in bubbles. Click a pipeline to drill down.",
          [Q(f"pipeline:bubblewatch_pipeline_verdict:code{OV}", instant=True, table=True),
           Q(f"bubblewatch_pipeline_verdict_confidence{OV}", instant=True, table=True),
           Q(f"bubblewatch_pipeline_bubble_ratio{OV}", instant=True, table=True),
           Q(f"bubblewatch_pipeline_concurrency{OV}", instant=True, table=True),
           Q(f"instance_pipeline:bubblewatch_stages:count{OV}", instant=True, table=True),
           Q(f"pipeline:bubblewatch_pipeline_bubble_energy_joules:rate5m{OV}",
             instant=True, table=True)],
          w=24, h=8,
          overrides=[
              _field_override("Verdict", mappings=[VERDICT_MAPPING],
                              custom_cellOptions={"type": "color-background"}),
              _field_override("Confidence", unit="percentunit", decimals=0),
              _field_override("Bubble ratio", unit="percentunit", decimals=0,
                              custom_cellOptions={"type": "gauge", "mode": "basic"},
                              min=0, max=1),
              _field_override("Concurrency", decimals=2),
              _field_override("Bubble power", unit="watt", decimals=0),
              _field_override("pipeline", links=[DRILL_LINK]),
          ],
          # Drop the differing metric names first, so that merge joins each
          # pipeline's values into one row.
          transformations=[
              _hide_fields("Time", "job", "__name__", rename={
                  "Value #A": "Verdict", "Value #B": "Confidence", "Value #C": "Bubble ratio",
                  "Value #D": "Concurrency", "Value #E": "Stages",
                  "Value #F": "Bubble power"}),
              {"id": "merge", "options": {}},
          ]),
        P("state-timeline", "Verdict over time",
          "The detector's verdict for each pipeline, window by window.",
          [Q(f"pipeline:bubblewatch_pipeline_verdict:code{OV}", "{{pipeline}}")],
          w=24, h=6, defaults={"mappings": [VERDICT_MAPPING], "color": {"mode": "thresholds"},
                               "thresholds": {"mode": "absolute",
                                              "steps": [{"color": "text", "value": None}]}}),
        P("timeseries", "Bubble ratio",
          "Share of stage time lost to bubbles: 1 - concurrency / stages. "
          "Serialized PP8 sits near 0.875.",
          [Q(f"bubblewatch_pipeline_bubble_ratio{OV}", "{{pipeline}}")],
          unit="percentunit", min=0, max=1),
        P("timeseries", "Effective concurrency vs stages",
          "Micro-batches in flight (sum of stage occupancies, solid) against the stages "
          "the pipeline has (dashed). A healthy pipeline keeps the two close; serialized ~1.",
          [Q(f"bubblewatch_pipeline_concurrency{OV}", "{{pipeline}} concurrency"),
           Q(f"instance_pipeline:bubblewatch_stages:count{OV}", "{{pipeline}} stages")],
          min=0,
          overrides=[{"matcher": {"id": "byFrameRefID", "options": "B"},
                      "properties": [{"id": "custom.lineStyle",
                                      "value": {"fill": "dash", "dash": [10, 10]}}]}]),
        P("table", "Active recommendations",
          "Recommendation rules firing now, by pipeline and severity "
          "(`bubblewatch diagnose` on the host prints the fix and expected gain).",
          [Q(f"bubblewatch_recommendation_active{OV} == 1", instant=True, table=True)],
          h=8,
          transformations=[_hide_fields("Time", "Value", "__name__", "job")]),
        P("stat", "Bubble energy (time range)",
          "Energy above idle that the pipeline's GPUs spent waiting in bubbles, "
          "over the dashboard's time range.",
          [Q(f"sum by (pipeline) (increase(bubblewatch_pipeline_bubble_energy_joules_total{OV}"
             "[$__range]))", "{{pipeline}}", instant=True)],
          h=8, unit="joule"),
        P("timeseries", "Bubble power",
          "Power burned in bubbles (5-minute rate of the bubble energy counter), against "
          "the pipeline's total board power.",
          [Q(f"pipeline:bubblewatch_pipeline_bubble_energy_joules:rate5m{OV}",
             "{{pipeline}} in bubbles"),
           Q(f"pipeline:bubblewatch_gpu_power_watts:sum{OV}", "{{pipeline}} total")],
          w=24, unit="watt", min=0),
    ]  # fmt: skip
    variables = [
        _datasource_var(),
        _query_var("instance", "Instance", "label_values(bubblewatch_build_info, instance)",
                   multi=True),
        _query_var("pipeline", "Pipeline",
                   'label_values(bubblewatch_pipeline_info{instance=~"$instance"}, pipeline)',
                   multi=True),
    ]  # fmt: skip
    return _dashboard(
        "bubblewatch-overview",
        "bubblewatch / Overview",
        "Pipelines watched by bubblewatch: verdict, bubbles, concurrency, recommendations.",
        variables,
        items,
    )


# -- pipeline drill-down ----------------------------------------------------

PL = '{instance=~"$instance", pipeline="$pipeline"}'
INST = '{instance=~"$instance"}'


def pipeline() -> Json:
    stage_gpu = "stage {{stage}} / GPU {{gpu}} ({{instance}})"
    items: list[P | Row] = [
        P("stat", "Verdict", "The detector's current verdict for this pipeline.",
          [Q(f"pipeline:bubblewatch_pipeline_verdict:code{PL}", "{{instance}}")],
          w=6, h=4, defaults={"mappings": [VERDICT_MAPPING]}),
        P("stat", "Bubble ratio", "Share of stage time lost to bubbles.",
          [Q(f"bubblewatch_pipeline_bubble_ratio{PL}", "{{instance}}")],
          w=6, h=4, unit="percentunit",
          defaults={"thresholds": {"mode": "absolute", "steps": [
              {"color": "green", "value": None}, {"color": "orange", "value": 0.3},
              {"color": "red", "value": 0.6}]}}),
        P("stat", "Concurrency / stages",
          "Effective micro-batches in flight, and the stages of the whole pipeline "
          "(all hosts).",
          [Q(f"bubblewatch_pipeline_concurrency{PL}", "concurrency ({{instance}})"),
           Q('pipeline:bubblewatch_stages:count{pipeline="$pipeline"}', "stages")],
          w=6, h=4, defaults={"decimals": 2}),
        P("stat", "Confidence", "Confidence of the current verdict.",
          [Q(f"bubblewatch_pipeline_verdict_confidence{PL}", "{{instance}}")],
          w=6, h=4, unit="percentunit"),
        Row("Stages"),
        P("state-timeline", "Stage occupancy",
          "Share of each window the stage did useful work (red idle, green busy). "
          "Serialized: every stage ~1/P; healthy: all stages high together.",
          [Q(f"bubblewatch_stage_occupancy_ratio{PL}", "stage {{stage}}")],
          w=24, h=8, unit="percentunit", min=0, max=1,
          defaults={"color": {"mode": "continuous-RdYlGr"}}),
        P("timeseries", "Stage lag",
          "Delay of load changes reaching each stage after stage 0. Lags ordered like the "
          "stages mean work passes through them one after another.",
          [Q(f"bubblewatch_stage_lag_seconds{PL}", "stage {{stage}}")],
          unit="s"),
        P("timeseries", "Kernel busy vs SM activity by stage",
          "Kernel-busy ratio (dashed) against SM activity (solid), stage means. "
          "Busy kernels with idle SMs: launch-bound (CUDA graphs off) or NCCL spin-wait.",
          [Q(f"pipeline_stage:bubblewatch_gpu_sm_active_ratio:avg{PL}",
             "stage {{stage}} SM active"),
           Q(f"pipeline_stage:bubblewatch_gpu_kernel_busy_ratio:avg{PL}",
             "stage {{stage}} kernel busy")],
          unit="percentunit", min=0, max=1,
          overrides=[{"matcher": {"id": "byFrameRefID", "options": "B"},
                      "properties": [{"id": "custom.lineStyle",
                                      "value": {"fill": "dash", "dash": [10, 10]}}]}]),
        Row("Training pipelines"),
        P("timeseries", "Bubble: measured vs schedule",
          "A training pipeline's measured bubble (share of stage-time not doing useful work) "
          "against the one its schedule allows: (p-1)/(m+p-1) for GPipe and 1F1B, "
          "(p-1)/(v*m+p-1) interleaved. Measured above expected by more than 5 points for "
          "15 minutes raises BubblewatchBubbleAboveSchedule. No measured line: the daemon "
          "cannot judge this pipeline (no schedule known, or samples too coarse).",
          [Q(f"bubblewatch_pipeline_measured_bubble_ratio{PL}", "measured ({{instance}})"),
           Q(f"bubblewatch_pipeline_expected_bubble_ratio{PL}", "schedule allows ({{instance}})")],
          w=8, unit="percentunit", min=0, max=1,
          overrides=[{"matcher": {"id": "byFrameRefID", "options": "B"},
                      "properties": [{"id": "custom.lineStyle",
                                      "value": {"fill": "dash", "dash": [10, 10]}}]}]),
        P("timeseries", "Step period",
          "Training step period found in the stages' activity (present when the samples "
          "resolve the steps: sample every 100-200 ms).",
          [Q(f"bubblewatch_pipeline_step_period_seconds{PL}", "{{instance}}")],
          w=8, unit="s", min=0),
        P("timeseries", "Busy seconds per step by stage",
          "Seconds of useful work each stage does per step. The slowest stage paces the "
          "pipeline: one stage above the others is imbalance (layers, embedding, loss) or a "
          "throttled GPU.",
          [Q(f"bubblewatch_stage_step_busy_seconds{PL}", "stage {{stage}}")],
          w=8, unit="s", min=0),
        Row("GPUs by stage"),
        P("timeseries", "Power by GPU",
          "Board power of each GPU, labelled with its stage.",
          [Q(f"pipeline_stage_gpu:bubblewatch_gpu_power_watts:labeled{PL}", stage_gpu)],
          unit="watt", min=0),
        P("timeseries", "SM activity by GPU",
          "Fraction of SM cycles with a resident warp, per GPU, labelled with its stage.",
          [Q(f"pipeline_stage_gpu:bubblewatch_gpu_sm_active_ratio:labeled{PL}", stage_gpu)],
          unit="percentunit", min=0, max=1),
        P("state-timeline", "Throttle reasons",
          "Clocks event reasons active on each GPU (idle excluded): power cap, thermal, "
          "slowdown, power brake. A straggler shows here.",
          [Q("pipeline_stage_gpu:bubblewatch_gpu_clocks_event_reason:labeled"
             '{instance=~"$instance", pipeline="$pipeline", reason!="gpu_idle"}',
             "stage {{stage}} / GPU {{gpu}} {{reason}}")],
          defaults={"mappings": [{"type": "value", "options": {
              "0": {"text": "off", "color": "transparent", "index": 0},
              "1": {"text": "active", "color": "red", "index": 1}}}],
              "color": {"mode": "thresholds"}}),
        P("timeseries", "SM clock by GPU",
          "Current SM clock of each GPU; one GPU lower than its peers is a straggler.",
          [Q(f"pipeline_stage_gpu:bubblewatch_gpu_sm_clock_hertz:labeled{PL}", stage_gpu)],
          unit="hertz"),
        Row("Engine"),
        P("timeseries", "Engine load",
          "Requests the serving engine is running and queueing, from its own metrics "
          "endpoint. A serialized pipeline with a queue is misconfigured; with one request "
          "running and none queued, the bubbles are inherent to pipeline parallelism.",
          [Q(f"bubblewatch_engine_running_requests{PL}", "running ({{instance}})"),
           Q(f"bubblewatch_engine_queued_requests{PL}", "queued ({{instance}})")],
          w=24, h=6, unit="short", min=0, defaults={"decimals": 0}),
        P("table", "Engine settings",
          "The serving engine's parsed settings that shape the pipeline (never its "
          "command line): CUDA graphs, async batch depth, micro-batch size.",
          [Q(f"bubblewatch_engine_info{PL}", instant=True, table=True)],
          w=24, h=5, transformations=[_hide_fields("Time", "Value", "__name__", "job")]),
        P("timeseries", "Engine settings, live",
          "The per-slot cap, request limit and depth the rules see: source=live when read "
          "back from the engine (SGLang /server_info), cmdline otherwise. A step in a live "
          "series is a change made on the running engine (POST /set_internal_state); "
          "bubblewatch compares the windows before and after it.",
          [Q(f"bubblewatch_engine_setting{PL}", "{{setting}} ({{source}})"),
           Q(f"increase(bubblewatch_engine_live_changes_total{PL}[$__range])",
             "live changes: {{setting}} {{result}}")],
          w=24, h=6, unit="short", min=0, defaults={"decimals": 0}),
        P("table", "Active recommendations",
          "Recommendation rules firing now for this pipeline.",
          [Q(f"bubblewatch_recommendation_active{PL} == 1", instant=True, table=True)],
          w=24, h=5, transformations=[_hide_fields("Time", "Value", "__name__", "job")]),
        Row("Daemon health"),
        P("stat", "Up", "Whether Prometheus can scrape bubblewatch on each instance.",
          [Q(f"up{INST}", "{{instance}}")], w=6, h=5,
          defaults={"mappings": [{"type": "value", "options": {
              "0": {"text": "down", "color": "red", "index": 0},
              "1": {"text": "up", "color": "green", "index": 1}}}]}),
        P("stat", "Last sample age",
          "Seconds since the last successful GPU sample (alert above 120 s).",
          [Q(f"instance:bubblewatch_last_sample_age:seconds{INST}", "{{instance}}")],
          w=6, h=5, unit="s",
          defaults={"thresholds": {"mode": "absolute", "steps": [
              {"color": "green", "value": None}, {"color": "orange", "value": 30},
              {"color": "red", "value": 120}]}}),
        P("timeseries", "Sampling and analysis time",
          "Time the last sampling pass and the last diagnosis took.",
          [Q(f"bubblewatch_sampling_duration_seconds{INST}", "sampling {{instance}}"),
           Q(f"bubblewatch_analysis_duration_seconds{INST}", "analysis {{instance}}")],
          unit="s", h=5),
        P("timeseries", "NVML errors",
          "NVML call failures per second, by call and code.",
          [Q(f"sum by (instance, call, code) (rate(bubblewatch_nvml_errors_total{INST}"
             "[$__rate_interval]))", "{{call}} {{code}} ({{instance}})")],
          unit="reqps", min=0),
        P("timeseries", "Alert deliveries",
          "bubblewatch's own alert deliveries per second by receiver and outcome, "
          "and alerts queued per receiver (right axis).",
          [Q(f"sum by (instance, receiver, outcome) (rate(bubblewatch_webhook_deliveries_total"
             f"{INST}[$__rate_interval]))", "{{receiver}} {{outcome}}"),
           Q(f"bubblewatch_webhook_queue_length{INST}", "{{receiver}} queued")],
          unit="reqps", min=0,
          overrides=[{"matcher": {"id": "byFrameRefID", "options": "B"}, "properties": [
              {"id": "unit", "value": "short"},
              {"id": "custom.axisPlacement", "value": "right"}]}]),
        P("timeseries", "Daemon CPU and memory",
          "CPU the daemon uses (cores) and its resident memory (right axis).",
          [Q(f"rate(process_cpu_seconds_total{INST}[$__rate_interval])", "CPU {{instance}}"),
           Q(f"process_resident_memory_bytes{INST}", "RSS {{instance}}")],
          unit="short", min=0,
          overrides=[{"matcher": {"id": "byFrameRefID", "options": "B"}, "properties": [
              {"id": "unit", "value": "bytes"},
              {"id": "custom.axisPlacement", "value": "right"}]}]),
    ]  # fmt: skip
    variables = [
        _datasource_var(),
        _query_var("pipeline", "Pipeline", "label_values(bubblewatch_pipeline_info, pipeline)",
                   multi=False),
        _query_var("instance", "Instance",
                   'label_values(bubblewatch_gpu_info{pipeline="$pipeline"}, instance)',
                   multi=True),
    ]  # fmt: skip
    return _dashboard(
        "bubblewatch-pipeline",
        "bubblewatch / Pipeline",
        "One pipeline in detail: stage occupancy and lag, GPUs by stage, throttling, "
        "engine settings, daemon health. Instances: every host the pipeline spans.",
        variables,
        items,
    )


DASHBOARDS = {"bubblewatch-overview.json": overview, "bubblewatch-pipeline.json": pipeline}


def render(build: Any) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write into")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path = args.out / name
        text = render(build)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date (run python dashboards/build.py): {', '.join(stale)}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
