"""The streaming JSON scanner and the interval arithmetic behind the Kineto source."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bubblewatch.sources.kineto import _jsonstream
from bubblewatch.sources.kineto import intervals as iv
from bubblewatch.sources.kineto._jsonstream import JsonObjectStream, StreamError

from .kineto_gen import PipelineSpec, write_pipeline_traces


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
@pytest.mark.parametrize("compressed", [False, True])
def test_stream_matches_json_load_at_any_chunk_size(tmp_path, monkeypatch, chunk, compressed):
    spec = PipelineSpec(pp=2, tp=2, duration_s=0.02, stage_us=4000, gzip=compressed)
    path = write_pipeline_traces(tmp_path, spec).paths[2]
    monkeypatch.setattr(_jsonstream, "_CHUNK_BYTES", chunk)
    opener = gzip.open if compressed else open
    with opener(path, "rt", encoding="utf-8") as f:
        whole = json.load(f)
    s = JsonObjectStream(path, frozenset({"traceEvents"}))
    events = [ev for _, ev in s]
    assert events == whole["traceEvents"]
    assert s.header == {k: v for k, v in whole.items() if k != "traceEvents"}
    assert not s.truncated


def test_members_after_the_array_and_numbers_at_the_end(tmp_path, monkeypatch):
    # On-demand traces write distributedInfo after traceEvents (output_json.cpp).
    text = '{"traceEvents": [{"a": 1}, {"b": [1, 2]}], "distributedInfo": {"rank": 3}, "n": 12345}'
    p = tmp_path / "t.json"
    p.write_text(text)
    monkeypatch.setattr(_jsonstream, "_CHUNK_BYTES", 3)
    s = JsonObjectStream(p, frozenset({"traceEvents"}))
    assert [e for _, e in s] == [{"a": 1}, {"b": [1, 2]}]
    assert s.header == {"distributedInfo": {"rank": 3}, "n": 12345}


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [{"a": 1}, {"b": "unfinished',
        '{"traceEvents": [{"a": 1}, {"b": 2',
        '{"traceEvents": [{"a": 1},',
        '{"traceEvents": [{"a": 1}',
    ],
)
def test_cut_text_is_truncated_not_an_error(tmp_path, text):
    p = tmp_path / "t.json"
    p.write_text(text)
    s = JsonObjectStream(p, frozenset({"traceEvents"}))
    assert [e for _, e in s] == [{"a": 1}]
    assert s.truncated


def test_cut_inside_a_multibyte_character(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes('{"traceEvents": [{"a": 1}, {"name": "é'.encode()[:-1])
    s = JsonObjectStream(p, frozenset({"traceEvents"}))
    assert [e for _, e in s] == [{"a": 1}]
    assert s.truncated


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('{"traceEvents": [\n{"a": 1}\n{"b": 2}]}', 3),
        ('{"traceEvents": [\n{"a": tru}]}', 2),
        ('{\n"x": 1 "y": 2}', 2),
        ('{"traceEvents": [1]\n]}', 2),
    ],
)
def test_broken_text_names_the_line(tmp_path, text, line):
    p = tmp_path / "t.json"
    p.write_text(text)
    with pytest.raises(StreamError) as e:
        list(JsonObjectStream(p, frozenset({"traceEvents"})))
    assert e.value.line == line


def test_not_utf8_and_corrupt_gzip(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [{"a": "\xff\xfe"}]}')
    with pytest.raises(StreamError, match="not UTF-8"):
        list(JsonObjectStream(p, frozenset({"traceEvents"})))
    g = tmp_path / "t.json.gz"
    g.write_bytes(gzip.compress(b'{"traceEvents": []}')[:10] + b"garbage" * 20)
    with pytest.raises(StreamError, match="gzip"):
        list(JsonObjectStream(g, frozenset({"traceEvents"})))


# -- intervals --------------------------------------------------------------------


def test_union_merges_overlapping_and_touching():
    u = iv.union([5, 0, 2, 10, 12], [6, 3, 4, 12, 13])
    assert u.start_us.tolist() == [0, 5, 10]
    assert u.end_us.tolist() == [4, 6, 13]
    assert u.total_us == 8


def test_subtract_and_gaps():
    a = iv.union([0, 10], [8, 20])
    b = iv.union([2, 15], [4, 30])
    d = iv.subtract(a, b)
    assert d.start_us.tolist() == [0, 4, 10]
    assert d.end_us.tolist() == [2, 8, 15]
    assert iv.gaps(a).tolist() == [2]


def test_busy_fraction_is_exact_per_bin():
    u = iv.union([0.5, 2.0], [1.5, 4.0])
    frac = iv.busy_fraction(u, np.array([0.0, 1.0, 2.0, 3.0, 5.0]))
    assert frac.tolist() == [0.5, 0.5, 1.0, 0.5]


def test_steps_split_on_long_gaps_and_transfers():
    u = iv.union([0, 12, 30, 50], [10, 20, 40, 60])
    # Gaps are 2, 10 and 10 µs.
    assert len(iv.steps(u, max_gap_us=5)) == 3
    assert len(iv.steps(u, max_gap_us=15)) == 1
    assert len(iv.steps(u, max_gap_us=100, breaks_us=np.array([45.0]))) == 2


def test_stagger_matches_the_next_start():
    a = iv.Intervals(np.array([0.0, 100.0, 200.0]), np.array([10.0, 110.0, 210.0]))
    b = a.shifted(12.5)
    s = iv.stagger(a, b, max_delay_us=50)
    assert s is not None and s.mean_us == 12.5 and s.n == 3
    assert iv.stagger(a, iv.Intervals.empty(), 50) is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 1000), st.floats(0, 50)),
        min_size=1,
        max_size=40,
    )
)
def test_binned_fractions_integrate_to_the_union(pairs):
    s = np.array([p[0] for p in pairs])
    e = s + np.array([p[1] for p in pairs])
    u = iv.union(s, e)
    edges = np.linspace(-1.0, 1100.0, 57)
    total = float(np.sum(iv.busy_fraction(u, edges) * np.diff(edges)))
    assert total == pytest.approx(u.total_us, abs=1e-6)
    # Disjoint and sorted.
    assert np.all(u.start_us[1:] > u.end_us[:-1])
    assert u.total_us <= float(np.sum(e - s)) + 1e-9


def test_spec_replace_keeps_generator_usable(tmp_path: Path):
    g = write_pipeline_traces(tmp_path, replace(PipelineSpec(), pp=1, duration_s=0.02))
    assert len(g.paths) == 1 and g.truth[0].compute_ns > 0
