"""Discovery on realistic fake /proc trees of SGLang, vLLM and TensorRT-LLM."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from bubblewatch.topology.discover import discover_topology
from bubblewatch.topology.procfs import ProcUnavailable

from .conftest import PROC_FIXTURES, Tree, assert_no_secret

EXAMPLE_STATIC = Path(__file__).resolve().parents[2] / "docs" / "examples" / "topology.yaml"


def test_sglang_pp8_titled_schedulers():
    t = Tree("sglang_pp8")
    res = discover_topology(t.processes, t.gpus, t.root)
    assert res.method == "proc"
    assert len(res.pipelines) == 1
    p = res.pipelines[0]
    assert p.topology.stages == tuple((g,) for g in range(8))
    assert p.topology.engine == "sglang"
    assert p.topology.pipeline_id == "sglang:30000"
    assert p.topology.source == "proc:4100"
    assert p.launcher_pid == 4100
    e = p.engine
    assert e is not None
    assert (e.pp_size, e.tp_size, e.pp_async_batch_depth) == (8, 1, 0)
    assert e.cuda_graph is False
    assert e.max_running_requests == 64
    assert e.layer_partition == (8, 8, 8, 8, 8, 8, 8, 5)
    assert e.host == "0.0.0.0"
    assert p.metrics_url == "http://127.0.0.1:30000/metrics"
    assert res.warnings == ()
    assert res.unassigned_gpus == ()


def test_sglang_pp4_tp2_by_uuid_in_reverse_with_spawned_workers():
    t = Tree("sglang_pp4_tp2_uuid")
    res = discover_topology(t.processes, t.gpus, t.root)
    assert res.method == "proc"
    topo = res.topology
    assert topo is not None
    # rank r = pp*2 + tp sits on CUDA device r = host GPU 7 - r.
    assert topo.stages == ((7, 6), (5, 4), (3, 2), (1, 0))
    assert res.engine is not None
    assert res.engine.pp_async_batch_depth == 4
    assert res.engine.layer_partition == (24, 24, 23, 23)
    assert res.pipelines[0].metrics_url == "http://127.0.0.1:30010/metrics"
    assert res.warnings == ()


def test_two_sglang_engines_get_two_pipelines_with_distinct_ids():
    t = Tree("sglang_two_engines")
    res = discover_topology(t.processes, t.gpus, t.root)
    assert [p.topology.stages for p in res.pipelines] == [((0, 1), (2, 3)), ((4, 5), (6, 7))]
    assert [p.topology.pipeline_id for p in res.pipelines] == ["sglang:30000", "sglang:30001"]
    assert [p.engine.base_gpu_id for p in res.pipelines if p.engine] == [0, 4]
    assert res.warnings == ()


def test_vllm_pp4_tp2_index_remap_and_worker_titles():
    t = Tree("vllm_pp4_tp2")
    res = discover_topology(t.processes, t.gpus, t.root)
    p = res.pipelines[0]
    assert p.topology.stages == ((4, 5), (6, 7), (0, 1), (2, 3))
    assert p.engine is not None
    assert p.engine.cuda_graph is False
    assert p.engine.cudagraph_mode == "NONE"
    assert p.engine.max_running_requests == 128
    assert p.engine.layer_partition == (20, 20, 20, 20)
    assert p.engine.model == "meta-llama/Llama-3.1-70B-Instruct"
    assert p.metrics_url == "http://127.0.0.1:8001/metrics"
    assert res.warnings == ()


def test_trtllm_pp2_tp2_through_mpi_workers():
    t = Tree("trtllm_pp2_tp2")
    res = discover_topology(t.processes, t.gpus, t.root)
    p = res.pipelines[0]
    assert p.topology.stages == ((0, 1), (2, 3))
    assert p.engine is not None
    assert p.engine.name == "trtllm"
    assert p.engine.max_running_requests == 128
    assert p.metrics_url == "http://localhost:8000/metrics"  # JSON iteration stats


@pytest.mark.parametrize(
    "name",
    ["sglang_pp8", "sglang_pp4_tp2_uuid", "sglang_two_engines", "vllm_pp4_tp2", "trtllm_pp2_tp2"],
)
def test_no_secret_reaches_the_result_or_the_log(name, caplog):
    t = Tree(name)
    with caplog.at_level(logging.DEBUG):
        res = discover_topology(t.processes, t.gpus, t.root)
    text = json.dumps(res.to_dict()) + repr(res)
    assert res.pipelines
    assert "<redacted>" in text  # every tree carries secrets that were found and replaced
    assert_no_secret(text)
    assert_no_secret(caplog.text)


def test_environment_is_allow_listed():
    t = Tree("sglang_pp8")
    env = discover_topology(t.processes, t.gpus, t.root).pipelines[0].topology.env
    assert set(env) == {"SGLANG_PP_LAYER_PARTITION", "NCCL_DEBUG"}


def test_hidden_processes_fall_back_to_the_static_file():
    t = Tree("sglang_pp8")
    hidden = {g: [90000 + g] for g in range(8)}  # host PIDs another namespace cannot see
    res = discover_topology(hidden, t.gpus, t.root, static_file=str(EXAMPLE_STATIC))
    assert res.method == "static-file"
    assert any("static topology file" in w for w in res.warnings)
    assert any("no engine process found" in w for w in res.warnings)
    assert res.topology is not None
    assert res.topology.source.startswith("static-file:")


def test_hidden_processes_without_a_static_file_scan_the_process_table():
    t = Tree("sglang_two_engines")
    res = discover_topology({0: [99999]}, t.gpus, t.root)
    assert res.method == "proc-scan"
    assert [p.topology.stages for p in res.pipelines] == [((0, 1), (2, 3)), ((4, 5), (6, 7))]
    assert any("not confirmed by NVML" in w for w in res.warnings)


def test_nothing_visible_and_nothing_given_says_so(tmp_path):
    res = discover_topology({}, [], str(tmp_path))
    assert res.method == "none"
    assert res.pipelines == ()
    assert any("no compute processes" in w for w in res.warnings)


class FakeProc:
    """An in-memory ProcReader for faults a directory tree cannot show to root."""

    def __init__(self, procs, denied=(), env_denied=()):
        self.procs = procs  # pid -> (ppid, argv, env)
        self.denied = set(denied)
        self.env_denied = set(env_denied)

    def _get(self, pid, what):
        if pid in self.denied:
            raise ProcUnavailable(pid, what, "permission denied")
        if pid not in self.procs:
            raise ProcUnavailable(pid, what, "vanished")
        return self.procs[pid]

    def cmdline(self, pid):
        return list(self._get(pid, "cmdline")[1])

    def environ(self, pid):
        if pid in self.env_denied:
            raise ProcUnavailable(pid, "environ", "permission denied")
        return dict(self._get(pid, "environ")[2])

    def ppid(self, pid):
        return self._get(pid, "status")[0]

    def pids(self):
        return iter(sorted(self.procs))


SG = ["python3", "-m", "sglang.launch_server", "--pp-size", "2", "--port", "30000"]


def test_vanished_and_denied_pids_become_warnings_not_errors():
    proc = FakeProc(
        {10: (None, SG, {}), 11: (10, ["sglang::scheduler_PP0"], {}), 12: (10, ["x"], {})},
        denied={12},
    )
    res = discover_topology({0: [11], 1: [12], 2: [13]}, [], proc=proc)
    assert res.method == "proc"
    assert res.topology is not None and res.topology.stages == ((0,), (1,))
    joined = " | ".join(res.warnings)
    assert "process 12: cannot read cmdline: permission denied" in joined
    assert "process 13: cannot read cmdline: vanished" in joined


def test_unreadable_launcher_environment_is_said():
    proc = FakeProc({10: (None, SG, {}), 11: (10, ["w"], {}), 12: (10, ["w"], {})}, env_denied={10})
    res = discover_topology({0: [11], 1: [12]}, [], proc=proc)
    assert res.topology is not None and res.topology.stages == ((0,), (1,))
    assert any("CUDA_VISIBLE_DEVICES and the layer partition" in w for w in res.warnings)


def test_forked_workers_sharing_the_launcher_cmdline_resolve_to_one_launcher():
    vl = ["vllm", "serve", "m", "-pp", "2"]
    proc = FakeProc({1: (None, ["init"], {}), 20: (1, vl, {}), 21: (20, vl, {}), 22: (20, vl, {})})
    res = discover_topology({0: [21], 1: [22]}, [], proc=proc)
    assert [p.launcher_pid for p in res.pipelines] == [20]
    assert res.topology is not None and res.topology.stages == ((0,), (1,))


def test_parent_loop_does_not_hang():
    proc = FakeProc({30: (31, ["a"], {}), 31: (30, ["b"], {})})
    res = discover_topology({0: [30]}, [], proc=proc)
    assert res.pipelines == () and res.unassigned_gpus == (0,)


def test_non_engine_gpu_process_is_reported_as_unassigned():
    proc = FakeProc(
        {
            10: (None, SG, {}),
            11: (10, ["w"], {}),
            12: (10, ["w"], {}),
            40: (None, ["python", "train.py"], {}),
        }
    )
    res = discover_topology({0: [11], 1: [12], 5: [40]}, [], proc=proc)
    assert res.unassigned_gpus == (5,)


def test_titles_that_disagree_with_flags_win_and_are_reported():
    # Flags say PP2 on GPUs 0,1 but the titles show stage 0 on GPU 1.
    proc = FakeProc(
        {
            10: (None, SG, {}),
            11: (10, ["sglang::scheduler_PP1"], {}),
            12: (10, ["sglang::scheduler_PP0"], {}),
        }
    )
    res = discover_topology({0: [11], 1: [12]}, [], proc=proc)
    assert res.topology is not None
    assert res.topology.stages == ((1,), (0,))
    assert res.topology.source.endswith("+titles")
    assert any("process titles put GPU(s)" in w for w in res.warnings)


def test_gpu_seen_where_flags_place_no_rank_is_reported():
    proc = FakeProc(
        {10: (None, SG, {}), 11: (10, ["w"], {}), 12: (10, ["w"], {}), 13: (10, ["w"], {})}
    )
    res = discover_topology({0: [11], 1: [12], 6: [13]}, [], proc=proc)
    assert any("GPU(s) [6] where its flags place no rank" in w for w in res.warnings)


def test_bad_flag_in_one_engine_does_not_stop_the_other():
    bad = ["python3", "-m", "sglang.launch_server", "--pp-size", "two", "--port", "30001"]
    proc = FakeProc(
        {
            10: (None, SG, {}),
            11: (10, ["w"], {}),
            12: (10, ["w"], {}),
            20: (None, bad, {}),
            21: (20, ["w"], {}),
        }
    )
    res = discover_topology({0: [11], 1: [12], 4: [21]}, [], proc=proc)
    assert [p.topology.pipeline_id for p in res.pipelines] == ["sglang:30000"]
    assert any("--pp-size expects an integer, got 'two'" in w for w in res.warnings)


def test_huge_parallel_size_in_a_command_line_is_refused_quickly():
    """Any local process may claim `--pp-size 100000000`: laying it out wedged discovery."""
    huge = ["python3", "-m", "sglang.launch_server", "--pp-size", "100000000", "--port", "30001"]
    proc = FakeProc({10: (None, SG, {}), 11: (10, ["w"], {}), 12: (10, ["w"], {}),
                     20: (None, huge, {}), 21: (20, ["w"], {})})  # fmt: skip
    t0 = time.monotonic()
    res = discover_topology({0: [11], 1: [12], 4: [21]}, [], proc=proc)
    assert time.monotonic() - t0 < 5
    assert [p.topology.pipeline_id for p in res.pipelines] == ["sglang:30000"]
    assert any("--pp-size must be at most 1048576, got 100000000" in w for w in res.warnings)


def test_fixture_trees_are_as_generated():
    # Regression guard: the trees on disk carry NUL-separated argv as Linux does.
    raw = (PROC_FIXTURES / "sglang_pp8" / "4100" / "cmdline").read_bytes()
    assert raw.endswith(b"\0") and b"\0-m\0sglang.launch_server\0" in raw
