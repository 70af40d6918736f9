"""Reading a long range of many series as many small queries, a few at a time.

A range is laid on one grid `start + k * step`. The step is chosen from the
range (`choose_step`) unless given. The work is cut by time (at most
`points_per_series` grid points per query: Prometheus refuses more than
11,000) and by series (hosts, then GPUs, so that one answer holds at most
`points_per_query` points), and `run_queries` keeps at most `concurrency`
queries in flight, handing each answer to the caller as it arrives: memory is
the result's columns plus a bounded number of answers, whatever the range.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np

from bubblewatch.model.recording import FloatArray
from bubblewatch.sources.prometheus_history.client import MAX_POINTS, PrometheusClient
from bubblewatch.sources.prometheus_history.matrix import RangeSeries

# Steps a chosen step is rounded up to, in seconds.
NICE_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
DEFAULT_MIN_STEP_S = 15.0
DEFAULT_MAX_GRID_POINTS = MAX_POINTS

# Called with (queries done, queries planned) after each answer.
ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class FetchLimits:
    """How a range is cut into queries, and how many run at once."""

    points_per_query: int = 200_000  # series x grid points in one answer
    points_per_series: int = 10_000  # grid points per series in one query
    concurrency: int = 4

    def __post_init__(self) -> None:
        if self.points_per_series < 1 or self.points_per_series > MAX_POINTS:
            raise ValueError(f"points_per_series must be 1..{MAX_POINTS}")
        if self.points_per_query < 1 or self.concurrency < 1:
            raise ValueError("points_per_query and concurrency must be >= 1")


def choose_step(
    start_s: float,
    end_s: float,
    *,
    min_step_s: float = DEFAULT_MIN_STEP_S,
    max_points: int = DEFAULT_MAX_GRID_POINTS,
) -> float:
    """The smallest nice step >= min_step_s that lays the range on at most max_points points."""
    need = max(min_step_s, (end_s - start_s) / max(1, max_points - 1))
    for s in NICE_STEPS_S:
        if s >= need:
            return float(s)
    return float(math.ceil(need / 86400.0) * 86400.0)


@dataclass(frozen=True)
class Grid:
    """Times start + k * step for k < n."""

    start_s: float
    step_s: float
    n: int

    @classmethod
    def over(cls, start_s: float, end_s: float, step_s: float) -> Grid:
        return cls(start_s, step_s, math.floor((end_s - start_s) / step_s + 1e-9) + 1)

    @property
    def end_s(self) -> float:
        return self.start_s + (self.n - 1) * self.step_s

    def t_s(self) -> FloatArray:
        return self.start_s + np.arange(self.n, dtype=np.float64) * self.step_s

    def index(self, t_s: FloatArray) -> tuple[np.ndarray, np.ndarray]:
        """Grid indices of the times, and which of them fall on the grid."""
        k = np.rint((t_s - self.start_s) / self.step_s).astype(np.int64)
        return k, (k >= 0) & (k < self.n)

    def chunks(self, points: int) -> list[tuple[float, float]]:
        """(start, end) of consecutive pieces of at most `points` grid points."""
        out = []
        for i in range(0, self.n, points):
            j = min(self.n, i + points) - 1
            out.append((self.start_s + i * self.step_s, self.start_s + j * self.step_s))
        return out


@dataclass(frozen=True)
class Query:
    """One range query; `tag` tells the caller what its answer is for."""

    promql: str
    start_s: float
    end_s: float
    step_s: float
    tag: object = None


def run_queries(
    client: PrometheusClient,
    queries: Sequence[Query],
    on_answer: Callable[[Query, list[RangeSeries]], None],
    *,
    concurrency: int,
    on_progress: ProgressFn | None = None,
) -> None:
    """Run the queries, at most `concurrency` at once; answers go to `on_answer` in this thread.

    The first error stops the rest (queries not yet started are not sent) and is raised.
    """
    total = len(queries)
    done = 0
    if on_progress is not None:
        on_progress(0, total)
    if total == 0:
        return
    stop = threading.Event()

    def one(q: Query) -> list[RangeSeries]:
        if stop.is_set():
            return []
        return client.query_range_once(q.promql, q.start_s, q.end_s, q.step_s)

    pending = iter(queries)
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="prom-query") as pool:
        flying: dict[Future[list[RangeSeries]], Query] = {}

        def top_up() -> None:
            while len(flying) < concurrency:
                q = next(pending, None)
                if q is None:
                    return
                flying[pool.submit(one, q)] = q

        top_up()
        try:
            while flying:
                finished, _ = wait(flying, return_when=FIRST_COMPLETED)
                for f in finished:
                    q = flying.pop(f)
                    on_answer(q, f.result())
                    done += 1
                    if on_progress is not None:
                        on_progress(done, total)
                top_up()
        except BaseException:
            stop.set()
            for f in flying:
                f.cancel()
            raise


@dataclass(frozen=True)
class HostSeries:
    """The GPUs one host exports, as the label that names the host reads them."""

    label: str  # the label that names the host (e.g. Hostname, instance)
    host: str
    gpus: tuple[str, ...]  # each GPU's value of the label that tells GPUs apart ("" if none)


def series_batches(
    hosts: Iterable[HostSeries],
    *,
    host_labels: Sequence[str],
    gpu_label: str | None,
    max_gpus: int,
) -> list[str]:
    """Label matchers that split the hosts' GPUs into groups of at most `max_gpus` (if possible).

    Whole hosts are grouped while they fit; a host with more GPUs is split by
    `gpu_label` (the label `hosts_of` read the GPUs from). Hosts named by a
    later label in `host_labels` (say `instance`) also match the earlier ones
    empty, so no series is read twice. One empty matcher means: no split (one
    query covers every series).
    """
    groups: dict[str, list[HostSeries]] = {}
    for h in sorted(hosts, key=lambda h: (h.label, h.host)):
        groups.setdefault(h.label, []).append(h)
    if sum(len(h.gpus) or 1 for hs in groups.values() for h in hs) <= max_gpus:
        return [""]
    out: list[str] = []
    for label, members in groups.items():
        earlier = [f'{x}=""' for x in host_labels[: host_labels.index(label)]]
        batch: list[str] = []
        size = 0
        for h in members:
            n = len(h.gpus) or 1
            if n > max_gpus and gpu_label is not None and all(h.gpus):
                for i in range(0, n, max_gpus):
                    part = sorted(h.gpus)[i : i + max_gpus]
                    out.append(
                        _join(
                            [*earlier, f"{label}={promql_string(h.host)}", _regex(gpu_label, part)]
                        )
                    )
                continue
            if batch and size + n > max_gpus:
                out.append(_join([*earlier, _regex(label, batch)]))
                batch, size = [], 0
            batch.append(h.host)
            size += n
        if batch:
            out.append(_join([*earlier, _regex(label, batch)]))
    return out


def _join(matchers: Sequence[str]) -> str:
    return ", ".join(m for m in matchers if m)


def _regex(label: str, values: Sequence[str]) -> str:
    return f"{label}=~{promql_string('|'.join(re2_escape(v) for v in values))}"


def promql_string(text: str) -> str:
    """`text` as a double-quoted PromQL string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def re2_escape(text: str) -> str:
    """`text` as an RE2 literal (Prometheus anchors regex matchers itself)."""
    return "".join("\\" + c if c in _RE_SPECIAL else c for c in text)


_RE_SPECIAL = frozenset(".^$*+?()[]{}|\\")


def hosts_of(
    labelsets: Iterable[Mapping[str, str]],
    *,
    host_labels: Sequence[str],
    gpu_label: str | None,
) -> list[HostSeries]:
    """Group series label sets by host (first present host label), with each host's GPUs."""
    found: dict[tuple[str, str], set[str]] = {}
    for labels in labelsets:
        label = next((h for h in host_labels if labels.get(h)), host_labels[-1])
        gpus = found.setdefault((label, labels.get(label, "")), set())
        gpus.add(labels.get(gpu_label, "") if gpu_label else "")
    return [HostSeries(label, host, tuple(sorted(g))) for (label, host), g in found.items()]
