"""Stage-to-stage links through the real pynvml against the fake library."""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager

import pytest
from fake_nvml.timeline import ramp

from bubblewatch.cli.main import main
from bubblewatch.model.topology import Topology
from bubblewatch.sources.nvml import Nvml
from bubblewatch.sources.nvml.interconnect import (
    Interconnect,
    InterconnectProbe,
    PairLink,
    StageLink,
    pcie_level_name,
)

from .engine_server import sglang_argv, write_proc


@contextmanager
def _nvml():
    nvml = Nvml()
    nvml.init()
    try:
        yield nvml
    finally:
        nvml.shutdown()


def test_nvlink_peers_make_every_link_nvlink(fake_nvml):
    fake_nvml(ramp(4), nvlink=1)
    with _nvml() as nvml:
        topo, found = InterconnectProbe(nvml).apply(Topology.from_sizes(4))
    assert topo.interconnect == "nvlink"
    assert [(link.from_stage, link.first.gpus, link.kind) for link in found.links] == [
        (0, (0, 1), "nvlink"),
        (1, (1, 2), "nvlink"),
        (2, (2, 3), "nvlink"),
    ]
    assert all(link.pcie_level is None and not link.mixed for link in found.links)


@pytest.mark.parametrize(
    ("level", "name"),
    [(10, "pcie-switch"), (20, "pcie-switches"), (30, "pcie-host-bridge"), (40, "numa-node"),
     (50, "cross-socket")],
)  # fmt: skip
def test_without_nvlink_the_pcie_level_is_named(fake_nvml, level, name):
    fake_nvml(ramp(2), topology_level=level)
    with _nvml() as nvml:
        topo, found = InterconnectProbe(nvml).apply(Topology.from_sizes(2))
    assert topo.interconnect == "pcie"
    (link,) = found.links
    assert (link.kind, link.pcie_level) == ("pcie", name)
    assert link.to_dict() == {
        "from_stage": 0,
        "to_stage": 1,
        "gpus": [0, 1],
        "kind": "pcie",
        "pcie_level": name,
        "mixed": False,
    }
    assert link.describe() == f"stage 0 -> 1 (GPU 0 -> 1): pcie, {name}"


def test_tp_stages_check_every_rank_pair(fake_nvml):
    fake_nvml(ramp(4), topology_level=10)
    with _nvml() as nvml:
        found = InterconnectProbe(nvml).probe(Topology.from_sizes(2, 2))
    (link,) = found.links
    assert [p.gpus for p in link.pairs()] == [(0, 2), (1, 3)]
    assert link.mixed is False and found.summary == "pcie"


def test_not_supported_leaves_the_interconnect_unknown_and_says_so_once(fake_nvml, caplog):
    fake_nvml(ramp(3), no_topology=1)
    given = Topology.from_sizes(3, interconnect="pcie")  # e.g. from a static file
    with _nvml() as nvml, caplog.at_level(logging.INFO, "bubblewatch.nvml"):
        probe = InterconnectProbe(nvml)
        topo, found = probe.apply(given)
        probe.probe(given)  # a rediscovery: nothing new to say
        errors = nvml.errors.to_dict()
    assert found.summary is None
    assert topo is given  # an unknown probe keeps what was already known
    assert [link.kind for link in found.links] == [None, None]
    assert found.links[0].first.error == "nvmlDeviceGetP2PStatus: not_supported"
    assert found.links[0].describe().endswith("unknown (nvmlDeviceGetP2PStatus: not_supported)")
    said = [r for r in caplog.records if "interconnect between" in r.getMessage()]
    assert len(said) == 1
    assert errors == {"nvmlDeviceGetP2PStatus": {"not_supported": 4}}


def test_a_lost_gpu_makes_only_its_links_unknown(fake_nvml):
    fake = fake_nvml(ramp(3), lost="2@0.5", topology_level=30)
    with _nvml() as nvml:
        fake.at(1.0)
        found = InterconnectProbe(nvml).probe(Topology.from_sizes(3))
    assert [(link.kind, link.pcie_level) for link in found.links] == [
        ("pcie", "pcie-host-bridge"),
        (None, None),
    ]
    assert "gpu_is_lost" in (found.links[1].first.error or "")
    assert found.summary == "pcie"  # one PCIe link is enough to say PCIe


def test_single_stage_has_no_links_and_no_summary(fake_nvml):
    fake_nvml(ramp(2), nvlink=1)
    with _nvml() as nvml:
        topo, found = InterconnectProbe(nvml).apply(Topology.from_sizes(1, 2))
    assert found.links == () and found.summary is None and topo.interconnect is None


def test_summary_and_mixed_rules():
    nv, pc = PairLink((0, 2), "nvlink"), PairLink((1, 3), "pcie", "cross-socket")
    unknown = PairLink((1, 3), None, error="x: not_supported")
    mixed = StageLink(0, nv, (pc,))
    assert mixed.mixed and Interconnect((mixed,)).summary == "pcie"
    assert "other GPUs differ: GPU 1->3 pcie cross-socket" in mixed.describe()
    assert mixed.to_dict()["pairs"][1] == {
        "gpus": [1, 3],
        "kind": "pcie",
        "pcie_level": "cross-socket",
    }
    partly = StageLink(0, nv, (unknown,))
    assert not partly.mixed and Interconnect((partly,)).summary is None
    assert Interconnect((StageLink(0, nv),)).summary == "nvlink"
    assert pcie_level_name(60) == "level-60"


def test_topology_command_shows_each_link(fake_nvml, tmp_path, capsys):
    root = write_proc(tmp_path / "proc", 4242, sglang_argv(30000, 3))
    fake_nvml(ramp(3), procs="0:4242,1:4242,2:4242", topology_level=10)
    assert main(["topology", "--proc-root", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (p,) = doc["pipelines"]
    assert p["topology"]["interconnect"] == "pcie"
    assert [(link["gpus"], link["kind"], link["pcie_level"]) for link in p["links"]] == [
        ([0, 1], "pcie", "pcie-switch"),
        ([1, 2], "pcie", "pcie-switch"),
    ]
    assert main(["topology", "--proc-root", str(root)]) == 0
    text = capsys.readouterr().out
    assert "  interconnect: pcie\n    stage 0 -> 1 (GPU 0 -> 1): pcie, pcie-switch\n" in text


def test_topology_command_without_nvml_says_links_are_unknown(tmp_path, capsys, monkeypatch):
    from bubblewatch.cli import topology as cli_topology
    from bubblewatch.model.inventory import GpuInfo

    root = write_proc(tmp_path / "proc", 4242, sglang_argv(30000, 2))
    inv = cli_topology.NvmlInventory(
        True, gpus=[GpuInfo(index=0), GpuInfo(index=1)], processes={0: [4242], 1: [4242]}
    )
    monkeypatch.setattr(cli_topology, "nvml_inventory", lambda: inv)
    monkeypatch.delenv("BUBBLEWATCH_FAKE_NVML_TIMELINE", raising=False)
    assert main(["topology", "--proc-root", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pipelines"][0]["links"] is None
    assert "interconnect" not in doc["pipelines"][0]["topology"]
    assert any(n.startswith("stage links unknown: nvmlInit") for n in doc["notes"])
