"""Per-GPU history from Prometheus to a Recording: what users already scrape, analysed later.

`load_prometheus(url, start, end, step)` finds which exporter's series the
server holds (dcgm-exporter, nvitop-exporter, nvidia_gpu_exporter or
bubblewatch itself), pulls each series with `query_range`, and lays them on one
grid `start + k * step`. By default each point is `avg_over_time` over the
step, so a ratio is the mean of the scrapes in that step rather than one
sample repeated; a step shorter than the scrape interval then leaves gaps
(NaN) instead of inventing values. GPUs on several hosts become distinct GPU
indices, host by host, with `GpuInfo.host` set.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import FloatArray, GpuSeries, LoadSeries, Recording
from bubblewatch.model.topology import Topology, TopologyError
from bubblewatch.sources.prometheus_history.client import (
    PrometheusClient,
    PrometheusError,
    RangeSeries,
    Transport,
)
from bubblewatch.sources.prometheus_history.dialects import (
    BUBBLEWATCH_INFO,
    Dialect,
    SeriesSpec,
    dialects,
)

TimeLike = float | int | str | datetime
_RELATIVE = re.compile(r"^(?:now)?\s*-\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_LOAD_QUERIES = (
    ("sglang", "sglang:num_running_reqs", "sglang:num_queue_reqs"),
    ("vllm", "vllm:num_requests_running", "vllm:num_requests_waiting"),
)


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


@dataclass(frozen=True)
class _GpuKey:
    host: str
    local: int | None
    uuid: str


def load_prometheus(
    url: str,
    start: TimeLike,
    end: TimeLike,
    step: float,
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
) -> Recording:
    """Pull per-GPU series from a Prometheus server into a Recording.

    `selector` narrows the GPU series (label matchers, e.g.
    `Hostname=~"node[12]"`); `load_selector` (when given, even "") also pulls
    SGLang's or vLLM's running and queued requests as engine load.
    `bearer_token` and `headers` authenticate; they never appear in errors.
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
    if not (step > 0 and math.isfinite(step)):
        raise PrometheusError(f"step must be > 0 seconds, got {step!r}", path=client.where)
    known = dialects()
    if dialect != "auto" and dialect not in known:
        raise PrometheusError(
            f"unknown dialect {dialect!r} (known: auto, {', '.join(known)})", path=client.where
        )
    fetch = _Fetcher(
        client, start_s=start_s, end_s=end_s, step_s=step, selector=sel, average=average
    )
    chosen, results = _pick_dialect(
        fetch, [known[dialect]] if dialect != "auto" else list(known.values())
    )
    for spec in chosen.series:
        if spec.name not in results:
            results[spec.name] = fetch(spec)
    info = fetch.info() if chosen.name == "bubblewatch" else []
    recording = _build(chosen, results, info, fetch)
    load = _load(fetch, load_sel) if load_sel is not None else None
    meta = dict(recording.meta)
    meta["prometheus"] = {
        **meta["prometheus"],
        "url": client.where,
        "selector": sel,
        "load": None if load is None else load[1],
    }
    return Recording(
        gpus=recording.gpus,
        series=recording.series,
        topology=recording.topology,
        load=load[0] if load is not None else LoadSeries.empty(),
        meta=meta,
    )


class _Fetcher:
    """Runs the range queries of one load with the same window, step and selector."""

    def __init__(
        self,
        client: PrometheusClient,
        *,
        start_s: float,
        end_s: float,
        step_s: float,
        selector: str,
        average: bool,
    ) -> None:
        self.client = client
        self.start_s, self.end_s, self.step_s = start_s, end_s, step_s
        self.selector = selector
        self.average = average
        n = math.floor((end_s - start_s) / step_s + 1e-9) + 1
        self.grid: FloatArray = start_s + np.arange(n, dtype=np.float64) * step_s

    def query(self, spec: SeriesSpec) -> str:
        inner = f"{spec.name}{{{self.selector}}}"
        if self.average and spec.average:
            return f"avg_over_time({inner}[{round(self.step_s * 1000)}ms])"
        return inner

    def __call__(self, spec: SeriesSpec) -> list[RangeSeries]:
        return self.client.query_range(self.query(spec), self.start_s, self.end_s, self.step_s)

    def raw(self, query: str) -> list[RangeSeries]:
        return self.client.query_range(query, self.start_s, self.end_s, self.step_s)

    def info(self) -> list[RangeSeries]:
        return self.raw(f"{BUBBLEWATCH_INFO}{{{self.selector}}}")

    def on_grid(self, s: RangeSeries) -> FloatArray:
        out = np.full(self.grid.shape, np.nan)
        k = np.rint((s.t_s - self.start_s) / self.step_s).astype(np.int64)
        ok = (k >= 0) & (k < out.size)
        out[k[ok]] = s.values[ok]
        return out


def _pick_dialect(
    fetch: _Fetcher, candidates: Sequence[Dialect]
) -> tuple[Dialect, dict[str, list[RangeSeries]]]:
    tried: list[str] = []
    for d in candidates:
        results: dict[str, list[RangeSeries]] = {}
        for spec in d.series:
            res = fetch(spec)
            results[spec.name] = res
            tried.append(spec.name)
            if res:
                return d, results
    sel = f" matching {{{fetch.selector}}}" if fetch.selector else ""
    raise PrometheusError(
        f"no GPU series{sel} between {_iso(fetch.start_s)} and {_iso(fetch.end_s)}; "
        f"looked for: {', '.join(tried)}",
        path=fetch.client.where,
    )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(d: Dialect, labels: Mapping[str, str]) -> _GpuKey:
    host = next((labels[h] for h in d.host_labels if labels.get(h)), "")
    raw = labels.get(d.gpu_label) if d.gpu_label else None
    local = int(raw) if raw is not None and raw.isdigit() else None
    uuid = labels.get(d.uuid_label, "") if d.uuid_label else ""
    return _GpuKey(host, local, uuid)


def _identity(key: _GpuKey) -> tuple[str, Any]:
    return (key.host, key.local if key.local is not None else key.uuid)


def _build(
    d: Dialect,
    results: Mapping[str, list[RangeSeries]],
    info: list[RangeSeries],
    fetch: _Fetcher,
) -> Recording:
    columns: dict[tuple[str, Any], dict[Metric, FloatArray]] = {}
    keys: dict[tuple[str, Any], _GpuKey] = {}
    names: dict[tuple[str, Any], str] = {}
    used: dict[str, str] = {}
    for spec in d.series:
        for s in results.get(spec.name, []):
            key = _key(d, s.labels)
            ident = _identity(key)
            if ident not in keys or (not keys[ident].uuid and key.uuid):
                keys[ident] = key
            if d.name_label and s.labels.get(d.name_label):
                names[ident] = s.labels[d.name_label]
            values = fetch.on_grid(s) * spec.scale
            cols = columns.setdefault(ident, {})
            prev = cols.get(spec.metric)
            # Two series for one metric (renamed field, two scrape jobs): first wins.
            cols[spec.metric] = values if prev is None else np.where(np.isnan(prev), values, prev)
            used.setdefault(spec.metric.value, spec.name)
    info_by_ident = {_identity(_key(d, s.labels)): s.labels for s in info}
    hosts = sorted({k.host for k in keys.values()})
    index: dict[tuple[str, Any], int] = {}
    offset = 0
    for host in hosts:
        mine = sorted(
            (i for i in keys if i[0] == host),
            key=lambda i: (keys[i].local is None, keys[i].local or 0, keys[i].uuid),
        )
        if len(hosts) == 1 and all(keys[i].local is not None for i in mine):
            index.update({i: keys[i].local or 0 for i in mine})  # keep NVML indices
            continue
        for n, i in enumerate(mine):
            index[i] = offset + n
        offset += len(mine)
    gpus: list[GpuInfo] = []
    series: dict[int, GpuSeries] = {}
    for ident, cols in columns.items():
        g = index[ident]
        lab = info_by_ident.get(ident, {})
        key = keys[ident]
        gpus.append(
            GpuInfo(
                index=g,
                uuid=key.uuid or lab.get("uuid", ""),
                name=names.get(ident) or lab.get("name", ""),
                host=key.host,
                pci_bus_id=lab.get("pci_bus_id", ""),
            )
        )
        rows = np.zeros(fetch.grid.shape, dtype=bool)
        for v in cols.values():
            rows |= np.isfinite(v)
        series[g] = GpuSeries(
            g,
            fetch.grid[rows],
            {m: v[rows] for m, v in sorted(cols.items(), key=lambda x: x[0].value)},
        )
    topology = _topology_from_info(d, info, index)
    meta = {
        "source": "prometheus",
        "prometheus": {
            "dialect": d.name,
            "start_s": fetch.start_s,
            "end_s": fetch.end_s,
            "step_s": fetch.step_s,
            "average": fetch.average,
            "series": used,
            "gpus": [
                {
                    "index": index[i],
                    "host": keys[i].host,
                    "local_index": keys[i].local,
                    "uuid": keys[i].uuid,
                }
                for i in sorted(index, key=index.__getitem__)
            ],
        },
    }
    return Recording(
        gpus=tuple(sorted(gpus, key=lambda x: x.index)),
        series=dict(sorted(series.items())),
        topology=topology,
        meta=meta,
    )


def _topology_from_info(
    d: Dialect, info: list[RangeSeries], index: Mapping[tuple[str, Any], int]
) -> Topology | None:
    """bubblewatch_gpu_info carries each GPU's pipeline and stage: the topology, when unique."""
    stages: dict[int, list[int]] = {}
    pipelines = set()
    for s in info:
        ident = _identity(_key(d, s.labels))
        stage = s.labels.get("stage", "")
        if ident not in index or not stage.isdigit():
            continue
        pipelines.add(s.labels.get("pipeline", ""))
        stages.setdefault(int(stage), []).append(index[ident])
    if not stages or len(pipelines) != 1 or sorted(stages) != list(range(len(stages))):
        return None
    try:
        return Topology(
            stages=tuple(tuple(sorted(set(stages[s]))) for s in sorted(stages)),
            source="prometheus:bubblewatch_gpu_info",
            pipeline_id=pipelines.pop(),
        )
    except TopologyError:
        return None


def _load(fetch: _Fetcher, selector: str) -> tuple[LoadSeries, str] | None:
    for engine, running, queued in _LOAD_QUERIES:
        r = fetch.raw(f"sum({running}{{{selector}}})")
        if not r:
            continue
        q = fetch.raw(f"sum({queued}{{{selector}}})")
        run = fetch.on_grid(r[0])
        que = fetch.on_grid(q[0]) if q else np.full(fetch.grid.shape, np.nan)
        keep = np.isfinite(run) | np.isfinite(que)
        return LoadSeries(fetch.grid[keep], run[keep], que[keep]), engine
    return None
