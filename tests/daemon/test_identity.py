"""The daemon's `pipeline` and `stage` labels: discovered from a multi-node engine or configured."""

from __future__ import annotations

import shlex
from pathlib import Path

from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.loop.publish import analysis_state
from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineResult
from bubblewatch.daemon.pipelines.discovery import Identity, name_pipelines, sim_pipelines
from bubblewatch.detect.types import Diagnosis, StageStats, Verdict
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology
from bubblewatch.topology.discover import discover_from_cmdline
from bubblewatch.topology.engine_config import EngineConfig

HOST = [GpuInfo(index=i, uuid=f"GPU-{i:02d}", name="H200") for i in range(4)]
NODE = (
    "python -m sglang.launch_server --model-path /models/Kimi-K2 --pp-size 8 --nnodes 2 "
    "--node-rank {rank} --dist-init-addr 10.0.0.1:5000"
)
SHARED_ID = "sglang@10.0.0.1:5000/Kimi-K2"


def found(cmd: str) -> list[tuple[Topology | None, EngineConfig | None]]:
    result = discover_from_cmdline(shlex.split(cmd), {}, HOST)
    return [(p.topology, p.engine) for p in result.pipelines]


def test_each_hosts_daemon_labels_its_half_of_one_pp8_engine_alike_and_globally():
    a, _ = name_pipelines(found(NODE.format(rank=0)), instance="host-a")
    b, overrides = name_pipelines(found(NODE.format(rank=1)), instance="host-b")
    assert [p.id for p in a + b] == [SHARED_ID, SHARED_ID]
    assert [p.first_stage for p in a + b] == [0, 4]
    assert overrides == ()


def test_a_single_node_engine_keeps_the_host_based_id():
    pipes, _ = name_pipelines(
        found("python -m sglang.launch_server --pp-size 4 --port 30000"),
        instance="h",
    )
    # Regression: the id once repeated itself ("h/sglang:30000/sglang:30000").
    assert [(p.id, p.first_stage) for p in pipes] == [("h/sglang:30000", 0)]


def test_configuration_overrides_discovery_and_says_so():
    node1 = found(NODE.format(rank=1))
    both, lines = name_pipelines(node1, instance="h", configured=Identity("kimi-pp8", 2))
    assert [(p.id, p.first_stage) for p in both] == [("kimi-pp8", 2)]
    assert len(lines) == 2
    assert f"'kimi-pp8' (configured) over '{SHARED_ID}' (discovered, node 1 of 2)" in lines[0]
    assert "first stage 2 (configured) over 4 (discovered" in lines[1]
    # Each field on its own: the id configured, the first stage still discovered.
    id_only, lines = name_pipelines(node1, instance="h", configured=Identity("kimi-pp8"))
    assert [(p.id, p.first_stage) for p in id_only] == [("kimi-pp8", 4)]
    assert len(lines) == 1
    # An explicit 0 is a configured first stage too, not "unset".
    zero, lines = name_pipelines(node1, instance="h", configured=Identity("", 0))
    assert [(p.id, p.first_stage) for p in zero] == [(SHARED_ID, 0)]
    assert "first stage 0 (configured) over 4" in lines[0]


def test_config_first_stage_is_unset_unless_given(tmp_path: Path):
    assert load_config(None, env={}).topology.first_stage is None
    f = tmp_path / "bw.yml"
    f.write_text("topology: {first_stage: 0}\n")
    assert load_config(f, env={}).topology.first_stage == 0
    assert load_config(None, {"--topology.first-stage": "4"}, env={}).topology.first_stage == 4


def test_simulated_multi_node_engine_gets_the_same_identity():
    topo = Topology(((0,), (1,), (2,), (3,)), engine="sglang")
    lookup = sim_pipelines([topo], shlex.split(NODE.format(rank=1)), instance="h")
    assert [(p.id, p.first_stage) for p in lookup.pipelines] == [(SHARED_ID, 4)]


def test_published_labels_start_at_each_pipelines_own_first_stage():
    def res(pid: str, first: int, gpus: tuple[int, ...]) -> PipelineResult:
        topo = Topology(tuple((g,) for g in gpus))
        stages = tuple(
            StageStats(s, (g,), 0.1, None, None, None, None, None, None, None)
            for s, g in enumerate(gpus)
        )
        diag = Diagnosis(Verdict.SERIALIZED, 0.9, (), stages, 10.0, 40)
        return PipelineResult(Pipeline(pid, topo, first_stage=first), diag, (), 0.0)

    st = analysis_state([res("p", 4, (0, 1)), res("q", 0, (2, 3))], outcomes={})
    assert dict(st.placement) == {0: ("p", 4), 1: ("p", 5), 2: ("q", 0), 3: ("q", 1)}
    by_pipe = {p.pipeline: [s.stage for s in p.stages] for p in st.pipelines}
    assert by_pipe["p"] == [4, 5]
    assert by_pipe["q"] == [0, 1]
