"""Long ranges and many GPUs from Prometheus: the step, queries cut by time and series, in parallel.

Against the synthetic server (fakeprom.py, real HTTP) the cut-up read must give
exactly what one query per series gives, with no answer over the limits and
never more queries in flight than allowed; against a real Prometheus the same
holds for its own data. The answer parser's fast path must agree with the
slow one on every layout it accepts and hand everything else to it.
"""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from bubblewatch.cli.main import main
from bubblewatch.model import Metric
from bubblewatch.sources.prometheus_history import PrometheusError, load_prometheus
from bubblewatch.sources.prometheus_history.fetch import (
    FetchLimits,
    Grid,
    HostSeries,
    choose_step,
    series_batches,
)
from bubblewatch.sources.prometheus_history.matrix import _slow, parse_matrix

from .fakeprom import Fleet, serve

T0 = 1_750_000_000.0


def test_step_is_chosen_from_the_range() -> None:
    assert choose_step(0, 600) == 15.0  # short ranges: the 15 s floor
    assert choose_step(0, 86_400) == 15.0  # a day: 5,761 points
    assert choose_step(0, 7 * 86_400) == 60.0  # a week: 10,081 points
    assert choose_step(0, 30 * 86_400) == 300.0
    assert choose_step(0, 600, min_step_s=1.0) == 1.0
    for span in (3600.0, 86_400.0, 7 * 86_400.0, 90 * 86_400.0):
        assert Grid.over(0.0, span, choose_step(0.0, span)).n <= 11_000


def test_grid_pieces_cover_every_point_once() -> None:
    g = Grid.over(100.0, 100.0 + 24 * 10.0, 10.0)
    assert g.n == 25
    pieces = g.chunks(10)
    assert pieces == [(100.0, 190.0), (200.0, 290.0), (300.0, 340.0)]
    covered = [t for a, b in pieces for t in np.arange(a, b + 1, 10.0)]
    assert covered == g.t_s().tolist()


def test_series_batches_group_hosts_and_split_big_ones() -> None:
    hosts = [HostSeries("Hostname", f"h{i}", tuple(str(g) for g in range(8))) for i in range(5)]
    labels = ("Hostname", "instance")
    assert series_batches(hosts, host_labels=labels, gpu_label="gpu", max_gpus=64) == [""]
    got = series_batches(hosts, host_labels=labels, gpu_label="gpu", max_gpus=16)
    assert got == ['Hostname=~"h0|h1"', 'Hostname=~"h2|h3"', 'Hostname=~"h4"']
    big = [HostSeries("Hostname", "a.b", tuple(str(g) for g in range(10)))]
    got = series_batches(big, host_labels=labels, gpu_label="gpu", max_gpus=4)
    assert got == [
        'Hostname="a.b", gpu=~"0|1|2|3"',
        'Hostname="a.b", gpu=~"4|5|6|7"',
        'Hostname="a.b", gpu=~"8|9"',
    ]
    # A host named only by `instance` must not match series that carry a Hostname.
    mixed = [HostSeries("Hostname", "h0", ("0",)), HostSeries("instance", "x:9400", ("0",))]
    got = series_batches(mixed, host_labels=labels, gpu_label="gpu", max_gpus=1)
    assert got == ['Hostname=~"h0"', 'Hostname="", instance=~"x:9400"']


def _same(a, b) -> None:
    assert a.gpu_indices == b.gpu_indices
    assert [g.host for g in a.gpus] == [g.host for g in b.gpus]
    for g in a.gpu_indices:
        sa, sb = a.series[g], b.series[g]
        np.testing.assert_array_equal(sa.t_s, sb.t_s)
        assert set(sa.values) == set(sb.values)
        for m in sa.values:
            np.testing.assert_array_equal(sa.values[m], sb.values[m], err_msg=f"{g} {m}")


def test_cut_up_reads_equal_one_query_per_series_and_respect_the_limits() -> None:
    fleet = Fleet(hosts=4, gpus_per_host=8, start_s=T0, end_s=T0 + 2 * 3600, scrape_s=5.0)
    start, end, step = T0 + 10, T0 + 2 * 3600, 10.0
    with serve(fleet) as (url, stats):
        whole = load_prometheus(
            url, start, end, step, limits=FetchLimits(10**9, 11_000, 1), now_s=end
        )
        assert len(stats.queries) == 6  # one per dialect series: nothing cut
        stats.queries.clear()
        limits = FetchLimits(points_per_query=2_000, points_per_series=200, concurrency=3)
        seen: list[tuple[int, int]] = []
        cut = load_prometheus(
            url,
            start,
            end,
            step,
            limits=limits,
            now_s=end,
            on_progress=lambda d, n: seen.append((d, n)),
        )
    _same(whole, cut)
    assert whole.gpu_indices == tuple(range(32))
    assert len(whole.series[0]) == 720  # every 10 s grid point of the two hours
    # Each 10 s point is the mean of the two scrapes in (t - 10, t]: at t - 5 and t.
    t = whole.series[3].t_s
    want = (
        fleet.values("DCGM_FI_PROF_SM_ACTIVE", 3, t)
        + fleet.values("DCGM_FI_PROF_SM_ACTIVE", 3, t - 5)
    ) / 2
    np.testing.assert_allclose(whole.series[3].values[Metric.SM_ACTIVE_RATIO], want)
    assert set(np.round(want, 6)) == {0.02, 0.42}  # busy in some windows, not in others
    # The cut: 720 points per series over pieces of at most 200, 10 GPUs per query at most.
    assert max(p for _, p in stats.queries) <= 2_000
    assert len(stats.queries) == 6 * 4 * 4  # series x time pieces x groups of hosts (8 GPUs each)
    assert 1 < stats.max_in_flight <= 3
    assert seen[0] == (0, 96) and seen[-1] == (96, 96)
    assert whole.meta["prometheus"]["queries"] == 6 and cut.meta["prometheus"]["queries"] == 96


def test_a_day_of_64_gpus_without_a_step_is_read_in_bounded_queries() -> None:
    fleet = Fleet(hosts=8, gpus_per_host=8, start_s=T0, end_s=T0 + 86_400, scrape_s=15.0)
    with serve(fleet) as (url, stats):
        rec = load_prometheus(url, T0 + 60, T0 + 86_400, None, now_s=T0 + 86_400)
    meta = rec.meta["prometheus"]
    assert meta["step_s"] == 15.0 and len(rec.gpus) == 64
    assert all(len(s) == 5757 for s in rec.series.values())
    assert max(p for _, p in stats.queries) <= FetchLimits().points_per_query
    assert stats.series_calls == 2  # bubblewatch's own names (none), then dcgm-exporter's


def test_the_first_error_stops_the_read() -> None:
    fleet = Fleet(hosts=2, gpus_per_host=8, start_s=T0, end_s=T0 + 3600)
    with serve(fleet) as (url, stats):
        stats.fail_after = 3
        limits = FetchLimits(points_per_query=800, points_per_series=100, concurrency=2)
        with pytest.raises(PrometheusError, match=r"HTTP 503.*too busy"):
            load_prometheus(url, T0, T0 + 3600, 5.0, limits=limits, now_s=T0 + 3600)
        # 6 series x 8 pieces x 2 hosts were planned; after the error only those in flight ran.
        assert 4 <= len(stats.queries) <= 3 + 2 + 1


@pytest.mark.parametrize(
    "body",
    [
        b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"x]]\\"y"},'
        b'"values":[[1.5,"NaN"],[2,"+Inf"],[3,"-Inf"],[4,"1e-05"]]},{"metric":{},"values":[]}]}}',
        b'{ "status" : "success" , "data" : { "resultType" : "matrix" , "result" : [ '
        b'{ "metric" : { "gpu" : "0" } , "values" : [ [ 1 , "2" ] , [ 3 , "4" ] ] } ] } }',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"g":"1"},'
        b'"values":[[1,"2"]]}]},"warnings":["x"]}',
    ],
)
def test_fast_parse_agrees_with_the_slow_one(body: bytes) -> None:
    fast = parse_matrix(body, where="w", query="q")
    slow = _slow(body, where="w", query="q")
    assert [s.labels for s in fast] == [s.labels for s in slow]
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a.t_s, b.t_s)
        np.testing.assert_array_equal(a.values, b.values)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (
            b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},'
            b'"values":[[1,"x"]]}]}}',
            "pairs",
        ),
        (b'{"status":"success","data":{"resultType":"vector","result":[]}}', "expected a matrix"),
        (b'{"status":"error","error":"too many samples"}', "too many samples"),
    ],
)
def test_what_the_fast_parse_cannot_read_gets_the_slow_paths_message(
    body: bytes, match: str
) -> None:
    with pytest.raises(PrometheusError, match=match):
        parse_matrix(body, where="w", query="q")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_analyze_shows_progress_on_a_terminal_only(monkeypatch, capsys) -> None:
    fleet = Fleet(hosts=1, gpus_per_host=8, start_s=T0, end_s=T0 + 1800)
    with serve(fleet) as (url, _):
        args = ["analyze", "--prometheus", url, f"--start={T0 + 30}", f"--end={T0 + 1800}"]
        tty = _Tty()
        monkeypatch.setattr("sys.stderr", tty)
        assert main([*args, "--step", "5"]) == 0
        assert "range queries" in tty.getvalue() and "\r" in tty.getvalue()
        out = capsys.readouterr().out
        assert "serialized" in out
        tty = _Tty()
        monkeypatch.setattr("sys.stderr", tty)
        assert main([*args, "--step", "5", "--json"]) == 0
        assert tty.getvalue() == ""  # --json: nothing but the JSON
        doc = json.loads(capsys.readouterr().out)
        assert doc["verdict"] == "serialized" and doc["source"] == url
        assert main([*args, "--concurrency", "0"]) == 2


def test_step_floor_reaches_the_detector() -> None:
    fleet = Fleet(hosts=1, gpus_per_host=2, start_s=T0, end_s=T0 + 600)
    with serve(fleet) as (url, _):
        rec = load_prometheus(url, T0 + 20, T0 + 600, None, now_s=T0 + 600)
    assert rec.meta["prometheus"]["step_s"] == 15.0
    assert math.isclose(rec.series[0].t_s[1] - rec.series[0].t_s[0], 15.0)
