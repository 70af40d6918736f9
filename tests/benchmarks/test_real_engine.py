"""The real-engine run's pure parts: the platform check, the truth from the hook's log,
the stand-in trace, the fixes' command lines and the hook itself (no engine needed)."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

from bubblewatch.sources.trace import TraceReader

HERE = Path(__file__).resolve().parents[2] / "benchmarks" / "real_engine"


def _load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"real_engine_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


host_check = _load("host_check")
standin = _load("standin")
fixes = _load("fixes")

CPUINFO_AVX512 = "processor : 0\nflags : fpu sse2 avx2 avx512f avx512bw\n"


def test_platform_check_names_each_missing_requirement():
    assert host_check.problems("aarch64", "", "", 8)[0].endswith("this machine is aarch64")
    mem = "MemAvailable:    4194304 kB\n"
    out = host_check.problems("x86_64", "flags : fpu sse2 avx2\n", mem, 1)
    assert len(out) == 3
    assert "no AVX-512" in out[0] and "1 CPU core" in out[1] and "4.0 GiB" in out[2]
    assert host_check.problems("x86_64", CPUINFO_AVX512, "MemAvailable: 20000000 kB\n", 2) == []


def _call(kind, rank, t0, t1, cpu, *, tokens=4):
    return standin.Call(kind, rank, t0, t1, cpu, tokens, tokens)


def test_truth_counts_work_and_overlap_from_the_calls():
    # Rank 0 works 0-0.2 s, rank 1 waits 0.2 s for its input then works 0.2-0.4 s, every
    # 0.5 s: each rank works 40 % of the time, never at once.
    calls = []
    for k in range(10):
        t = 0.5 * k
        calls += [_call("exec", 0, t, t + 0.2, 0.2), _call("exec", 1, t, t + 0.4, 0.2)]
    tr = standin.truth(calls, 0.0, 5.0)
    assert tr.work == pytest.approx({0: 0.4, 1: 0.4})
    assert tr.bubble_ratio == pytest.approx(0.6)
    assert tr.both_busy_ratio == pytest.approx(0.0, abs=1e-3)
    assert tr.steps_per_s == pytest.approx(2.0)
    assert tr.mean_in_flight == pytest.approx(0.8, abs=1e-3)  # 0.4 s of each 0.5 s
    # The same calls shifted so that the ranks compute together half of each forward pass.
    shifted = [
        _call(c.kind, c.rank, c.t0 - 0.1, c.t1 - 0.1, c.cpu_s) if c.rank == 1 else c for c in calls
    ]
    assert standin.truth(shifted, 0.0, 5.0).both_busy_ratio == pytest.approx(0.2, abs=0.01)


def test_calls_cut_by_a_killed_worker_are_skipped(tmp_path):
    (tmp_path / "exec-1.tsv").write_text("exec\t0\t1.0\t1.1\t0.1\t4\t4\nexec\t0\t1.2\t")
    assert standin.read_calls(tmp_path) == [_call("exec", 0, 1.0, 1.1, 0.1)]


def test_the_standin_trace_reads_back_as_a_pipeline(tmp_path):
    res = types.SimpleNamespace(
        t0=100.0,
        t1=112.0,
        cpu={
            r: [(100.0 + 0.2 * i, 0.05 * i * (r + 1), 0.01 * i) for i in range(61)] for r in (0, 1)
        },
        counts=[(100.0 + 0.2 * i, 100.05 + 0.2 * i, 4, 4, 4.0, 0.0) for i in range(61)],
    )
    path = tmp_path / "s.jsonl"
    a, b = standin.write_trace(path, res, argv=["python", "-m", "vllm"], version="0.32.0",
                               pids={0: 11, 1: 12}, skip_s=1.0)  # fmt: skip
    assert (a, b) == (101.0, 112.0)
    reader = TraceReader(path)
    rec = reader.read()
    assert reader.header["topology"]["stages"] == [[0], [1]]
    assert reader.header["meta"]["engine_version"] == "0.32.0"
    samples = [json.loads(ln) for ln in path.read_text().splitlines()[1:]]
    user = {g: {s["sm_active_ratio"] for s in samples if s.get("gpu") == g} for g in (0, 1)}
    assert user == {0: {0.25}, 1: {0.5}}  # 0.05 and 0.1 user seconds per 0.2 s
    assert {s["kernel_busy_ratio"] for s in samples if s.get("gpu") == 0} == {0.3}
    assert len(rec.load) == 56 and set(rec.load.running) == {4.0}
    # With the spin's split measured (2 user seconds per system second), 2 x 0.01 s of each
    # 0.2 s sample's user time is spin: 0.05 - 0.02 = 0.03 s of work on rank 0.
    standin.write_trace(path, res, argv=["vllm"], version="0.32.0", pids={0: 11, 1: 12},
                        skip_s=1.0, spin_user_per_sys={0: 2.0})  # fmt: skip
    samples = [json.loads(ln) for ln in path.read_text().splitlines()[1:]]
    assert {round(s["sm_active_ratio"], 6) for s in samples if s.get("gpu") == 0} == {0.15}
    assert {s["sm_active_ratio"] for s in samples if s.get("gpu") == 1} == {0.5}


def test_spin_calibration_needs_system_time_to_split():
    before = {0: (1.0, 1.0), 1: (1.0, 1.0)}
    after = {0: (1.3, 1.2), 1: (1.3, 1.01)}
    assert standin.spin_calibration(before, after) == pytest.approx({0: 1.5, 1: 0.0})


def test_a_fix_replaces_the_flags_it_removes():
    tp = next(f for f in fixes.FIXES if f.name == "tp-instead-of-pp")
    argv = ["python", "-m", "vllm", "--pipeline-parallel-size", "2", "--port", "1"]
    assert tp.apply(argv) == ["python", "-m", "vllm", "--port", "1", "--tensor-parallel-size", "2"]
    assert [f.name for f in fixes.select("all")] == [f.name for f in fixes.FIXES]
    assert fixes.select("none") == []
    with pytest.raises(ValueError, match="unknown fix"):
        fixes.select("max-num-seqs,nope")


def test_a_read_may_report_any_value_the_gauges_held_while_it_ran():
    gauges = [(10.0, 4, 0), (11.0, 3, 1), (11.5, 2, 0), (12.0, 0, 0)]
    assert standin.served_between(gauges, 10.2, 10.9) == {4}  # set before, held throughout
    assert standin.served_between(gauges, 10.9, 11.6) == {4, 2}  # 3 + 1 is 4 too
    assert standin.served_between(gauges, 9.0, 9.5) == {0}  # before the first set
    assert standin.served_between(gauges, 13.0, 14.0) == {0}


def test_the_gauge_and_scheduler_logs_read_back_in_time_order(tmp_path, monkeypatch):
    monkeypatch.setenv("BUBBLEWATCH_EXEC_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    hook = _load("engine_hook")

    class Logger:
        def record(self, scheduler_stats, iteration_stats=None, **kw):
            return "recorded"

    class Scheduler:
        def make_stats(self):
            return types.SimpleNamespace(
                num_running_reqs=3, num_waiting_reqs=2, num_skipped_waiting_reqs=1
            )

    hook._wrap_prometheus(types.SimpleNamespace(PrometheusStatLogger=Logger))
    hook._wrap_scheduler(types.SimpleNamespace(Scheduler=Scheduler))
    log, sched = Logger(), Scheduler()
    stats = sched.make_stats()
    assert log.record(stats, None) == "recorded"
    assert log.record(None, None) == "recorded"  # no stats: nothing logged
    log._bubblewatch_stats_log.close()
    sched._bubblewatch_stats_log.close()
    # waiting as vLLM's gauge sums it: waiting + skipped (deferred)
    assert [(r, w) for _, r, w in standin.read_counts(tmp_path, "gauge")] == [(3, 3)]
    assert [(r, w) for _, r, w in standin.read_counts(tmp_path, "sched")] == [(3, 3)]


def test_every_rendered_fix_that_changes_the_start_is_tried_once():
    rendered = [
        {"rule": "MaxNumSeqsLimitsLoad", "fix": {"add_flags": {"--max-num-seqs": "32"}}},
        {"rule": "Other", "fix": {"add_flags": {"--flag": None}, "set_env": {"A": "1"}}},
        {"rule": "NoteOnly", "fix": {"note": "judge by SM activity"}},
    ]
    tried = fixes.to_try(fixes.select("max-num-seqs"), rendered)
    # the rendered max-num-seqs is the chosen one already; the note-only fix starts nothing
    assert [(f.args, f.env) for f in tried] == [
        (["--max-num-seqs", "32"], {}),
        (["--flag"], {"A": "1"}),
    ]
    assert tried[1].rule == "Other"


def test_the_hook_times_each_call_and_passes_results_through(tmp_path, monkeypatch):
    monkeypatch.setenv("BUBBLEWATCH_EXEC_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the hook's finder goes after
    hook = _load("engine_hook")
    assert isinstance(sys.meta_path[0], hook._Finder)

    class Worker:
        rank = 1

        def execute_model(self, scheduler_output):
            return "out"

        def sample_tokens(self, grammar_output):
            return "sampled"

    mod = types.SimpleNamespace(Worker=Worker)
    hook._wrap(mod)
    sched = types.SimpleNamespace(
        total_num_scheduled_tokens=5, num_scheduled_tokens={"a": 3, "b": 2}
    )
    w = Worker()
    assert w.execute_model(sched) == "out" and w.sample_tokens(None) == "sampled"
    w._bubblewatch_log.close()
    lines = [ln.split("\t") for ln in next(tmp_path.glob("exec-*.tsv")).read_text().splitlines()]
    assert [(p[0], p[1], p[5], p[6]) for p in lines] == [
        ("exec", "1", "5", "2"),
        ("sample", "1", "0", "0"),
    ]
    assert all(float(p[3]) >= float(p[2]) for p in lines)


def test_the_simulators_side_runs_one_request_per_forward_pass_at_c1():
    sim_compare = _load("sim_compare")
    one = sim_compare.simulated(1, 0.0, duration_s=3.0)
    assert one["reqs_per_step"] == pytest.approx(1.0)
    four = sim_compare.simulated(4, 0.0, duration_s=3.0)
    assert 1.0 < four["reqs_per_step"] <= 4.0
