"""Per-GPU history from Prometheus to a Recording: what users already scrape, analysed later.

`load_prometheus(url, start, end, step)` asks the server which exporter's
series it holds (dcgm-exporter, nvitop-exporter, nvidia_gpu_exporter or
bubblewatch itself; `/api/v1/series`), pulls each series with `query_range`
and lays them on one grid `start + k * step` (the step chosen from the range
unless given). Long ranges and many GPUs are read as many bounded queries, a
few at a time (`fetch.py`), straight into columns (`grid_columns.py`). By default
each point is `avg_over_time` over the step, so a ratio is the mean of the
scrapes in that step rather than one sample repeated; a step shorter than
the scrape interval then leaves gaps (NaN) instead of inventing values. GPUs
on several hosts become distinct GPU indices, host by host, with
`GpuInfo.host` set.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

import numpy as np

from bubblewatch import engines
from bubblewatch.model.exported import GPU_INFO
from bubblewatch.model.recording import FloatArray, LoadSeries, Recording
from bubblewatch.sources.prometheus_history.client import PrometheusClient, Transport
from bubblewatch.sources.prometheus_history.dialects import (
    Dialect,
    SeriesSpec,
    dialects,
)
from bubblewatch.sources.prometheus_history.fetch import (
    FetchLimits,
    Grid,
    ProgressFn,
    Query,
    choose_step,
    hosts_of,
    run_queries,
    series_batches,
)
from bubblewatch.sources.prometheus_history.grid_columns import GridColumns
from bubblewatch.sources.prometheus_history.matrix import PrometheusError, RangeSeries

TimeLike = float | int | str | datetime
_RELATIVE = re.compile(r"^(?:now)?\s*-\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
# Label queries (bubblewatch_gpu_info) read this many points over any range.
_INFO_POINTS = 120


def parse_time(value: TimeLike, now_s: float) -> float:
    """Epoch seconds from a number, RFC 3339 text (UTC if no zone), `now` or `-1h`/`now-30m`."""
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return dt.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    if text == "now":
        return now_s
    m = _RELATIVE.match(text)
    if m:
        return now_s - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"cannot read time {text!r}: give epoch seconds, RFC 3339 "
            "(2025-01-31T12:00:00Z), 'now' or a relative time like -1h or now-30m"
        ) from None
    return parse_time(dt, now_s)


def normalize_selector(selector: str | None) -> str:
    """Label matchers without braces: `{job="dcgm"}` and `job="dcgm"` both give `job="dcgm"`."""
    if selector is None:
        return ""
    s = selector.strip()
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1].strip()
    if "{" in s or "}" in s:
        raise ValueError(f'selector must be label matchers like job="dcgm", got {selector!r}')
    return s


def load_prometheus(
    url: str,
    start: TimeLike,
    end: TimeLike,
    step: float | None,
    selector: str | None = None,
    *,
    dialect: str = "auto",
    headers: Mapping[str, str] | None = None,
    bearer_token: str | None = None,
    timeout_s: float = 30.0,
    average: bool = True,
    load_selector: str | None = None,
    now_s: float | None = None,
    transport: Transport | None = None,
    limits: FetchLimits | None = None,
    on_progress: ProgressFn | None = None,
) -> Recording:
    """Pull per-GPU series from a Prometheus server into a Recording.

    `step` None chooses one from the range (`choose_step`). `selector` narrows
    the GPU series (label matchers, e.g. `Hostname=~"node[12]"`);
    `load_selector` (when given, even "") also pulls SGLang's or vLLM's
    running and queued requests as engine load. `bearer_token` and `headers`
    authenticate; they never appear in errors. `limits` cuts the work into
    queries and bounds how many run at once; `on_progress(done, planned)`
    follows them.
    """
    import time

    now = time.time() if now_s is None else now_s
    try:
        start_s, end_s = parse_time(start, now), parse_time(end, now)
        sel = normalize_selector(selector)
        load_sel = None if load_selector is None else normalize_selector(load_selector)
    except ValueError as e:
        raise PrometheusError(str(e), path="<arguments>") from None
    hdrs = dict(headers or {})
    if bearer_token:
        hdrs["Authorization"] = f"Bearer {bearer_token}"
    client = PrometheusClient(url, headers=hdrs, timeout_s=timeout_s, transport=transport)
    if not end_s > start_s:
        raise PrometheusError(
            f"end ({end_s:.3f}) must be after start ({start_s:.3f})", path=client.where
        )
    step_s = choose_step(start_s, end_s) if step is None else step
    if not (step_s > 0 and math.isfinite(step_s)):
        raise PrometheusError(f"step must be > 0 seconds, got {step!r}", path=client.where)
    known = dialects()
    if dialect != "auto" and dialect not in known:
        raise PrometheusError(
            f"unknown dialect {dialect!r} (known: auto, {', '.join(known)})", path=client.where
        )
    lim = limits or FetchLimits()
    grid = Grid.over(start_s, end_s, step_s)
    candidates = [known[dialect]] if dialect != "auto" else list(known.values())
    chosen, found = _discover(client, candidates, sel, start_s, end_s)
    columns = GridColumns(chosen, grid)
    queries = _plan(chosen, found, grid, selector=sel, average=average, limits=lim)
    load = _LoadColumns(grid)
    if load_sel is not None:
        found_engine = _load_engine(client, load_sel, start_s, end_s)
        if found_engine is not None:
            engine, load.per_micro_batch = found_engine
            load.engine = engine[0]
            queries += _load_plan(engine, load_sel, grid, lim)

    def on_answer(q: Query, answer: list[RangeSeries]) -> None:
        if isinstance(q.tag, int):
            columns.add(q.tag, answer)
        else:
            load.add(str(q.tag), answer)

    run_queries(client, queries, on_answer, concurrency=lim.concurrency, on_progress=on_progress)
    info = _info(client, sel, start_s, end_s) if chosen.name == "bubblewatch" else []
    meta = {
        "dialect": chosen.name,
        "start_s": start_s,
        "end_s": end_s,
        "step_s": step_s,
        "average": average,
        "url": client.where,
        "selector": sel,
        "load": load.engine,
        "queries": len(queries),
    }
    recording = columns.build(info, meta)
    return Recording(
        gpus=recording.gpus,
        series=recording.series,
        topology=recording.topology,
        load=load.series(),
        meta={"source": "prometheus", "prometheus": dict(recording.meta)},
    )


def _query(spec: SeriesSpec, matchers: str, step_s: float, average: bool) -> str:
    inner = f"{spec.name}{{{matchers}}}"
    if average and spec.average:
        return f"avg_over_time({inner}[{round(step_s * 1000)}ms])"
    return inner


def _discover(
    client: PrometheusClient,
    candidates: Sequence[Dialect],
    selector: str,
    start_s: float,
    end_s: float,
) -> tuple[Dialect, dict[str, list[dict[str, str]]]]:
    """The first dialect with series in the range, and its series' label sets by name."""
    tried: list[str] = []
    for d in candidates:
        names = [spec.name for spec in d.series]
        tried += names
        found: dict[str, list[dict[str, str]]] = {}
        for labels in client.series([f"{n}{{{selector}}}" for n in names], start_s, end_s):
            found.setdefault(labels.get("__name__", ""), []).append(labels)
        if any(n in found for n in names):
            return d, found
    sel = f" matching {{{selector}}}" if selector else ""
    raise PrometheusError(
        f"no GPU series{sel} between {_iso(start_s)} and {_iso(end_s)}; "
        f"looked for: {', '.join(tried)}",
        path=client.where,
    )


def _plan(
    d: Dialect,
    found: Mapping[str, list[dict[str, str]]],
    grid: Grid,
    *,
    selector: str,
    average: bool,
    limits: FetchLimits,
) -> list[Query]:
    """Queries for every series of `d` the server holds: by time piece and group of GPUs."""
    points = min(limits.points_per_series, grid.n)
    pieces = grid.chunks(points)
    split = d.gpu_label or d.uuid_label
    queries: list[Query] = []
    for i, spec in enumerate(d.series):
        labelsets = found.get(spec.name)
        if not labelsets:
            continue
        hosts = hosts_of(labelsets, host_labels=d.host_labels, gpu_label=split)
        batches = series_batches(
            hosts,
            host_labels=d.host_labels,
            gpu_label=split,
            max_gpus=max(1, limits.points_per_query // points),
        )
        for batch in batches:
            promql = _query(
                spec, ", ".join(m for m in (selector, batch) if m), grid.step_s, average
            )
            queries += [Query(promql, a, b, grid.step_s, i) for a, b in pieces]
    return queries


def _info(
    client: PrometheusClient, selector: str, start_s: float, end_s: float
) -> list[RangeSeries]:
    # Only the labels matter: a coarse step keeps the answer small over any range.
    step = max(1.0, (end_s - start_s) / _INFO_POINTS)
    return client.query_range(f"{GPU_INFO}{{{selector}}}", start_s, end_s, step)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _LoadColumns:
    """The engine's running and queued requests on the grid, combined as the live reader does.

    `per_micro_batch`: SGLang with several pipeline ranks, whose running gauge is
    the size of one micro-batch (bubblewatch/sources/engine_metrics.py): the
    reading is then also the series' `micro_batch`, and `running` a lower bound.
    """

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.engine: str | None = None
        self.per_micro_batch = False
        self.cols: dict[str, FloatArray] = {}

    def add(self, which: str, answer: list[RangeSeries]) -> None:
        col = self.cols.setdefault(which, np.full(self.grid.n, np.nan))
        for s in answer[:1]:
            k, ok = self.grid.index(s.t_s)
            col[k[ok]] = s.values[ok]

    def series(self) -> LoadSeries:
        if self.engine is None:
            return LoadSeries.empty()
        nan = np.full(self.grid.n, np.nan)
        run, que = self.cols.get("running", nan), self.cols.get("queued", nan)
        keep = np.isfinite(run) | np.isfinite(que)
        micro = run[keep] if self.per_micro_batch else None
        return LoadSeries(self.grid.t_s()[keep], run[keep], que[keep], micro)


def _load_engine(
    client: PrometheusClient, selector: str, start_s: float, end_s: float
) -> tuple[tuple[str, str, str], bool] | None:
    """The engine whose gauges the server holds; whether its running gauge counts a micro-batch."""
    for engine in engines.all_engines():
        running, queued = engine.metrics.running, engine.metrics.queued
        if engine.metrics.format != "prometheus" or running is None or queued is None:
            continue
        labelsets = client.series([f"{running}{{{selector}}}"], start_s, end_s)
        if labelsets:
            return (engine.name, running, queued), engine.metrics.per_micro_batch(labelsets)
    return None


def _load_plan(
    engine: tuple[str, str, str], selector: str, grid: Grid, limits: FetchLimits
) -> list[Query]:
    """The maximum over one replica's ranks (SGLang's rank labels), summed over replicas."""
    kind, running, queued = engine
    pieces = grid.chunks(min(limits.points_per_series, grid.n))
    known = engines.get(kind)
    ranks = ", ".join(sorted(known.metrics.rank_labels)) if known is not None else ""

    def promql(name: str) -> str:
        inner = f"{name}{{{selector}}}"
        return f"sum(max without ({ranks}) ({inner}))" if ranks else f"sum({inner})"

    return [
        Query(promql(name), a, b, grid.step_s, which)
        for which, name in (("running", running), ("queued", queued))
        for a, b in pieces
    ]
