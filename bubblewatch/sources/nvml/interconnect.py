"""The link between consecutive pipeline stages: NVLink or PCIe (and how far apart), from NVML.

For each pair of consecutive stages the first GPU of each is checked:
`nvmlDeviceGetP2PStatus(.., NVML_P2P_CAPS_INDEX_NVLINK)` OK means "nvlink";
otherwise the link is "pcie", and `nvmlDeviceGetTopologyCommonAncestor` says
how far apart the two GPUs sit on the PCIe tree. The other TP ranks are
checked rank by rank, and `mixed` says when they disagree with the first.

An NVML error (NotSupported, a lost GPU, ...) makes that link unknown; it is
logged once per (call, error) by the `InterconnectProbe` and is never fatal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from bubblewatch.model.topology import Topology
from bubblewatch.sources.nvml.errors import NvmlError, code_name

log = logging.getLogger("bubblewatch.nvml")

NVLINK = "nvlink"
PCIE = "pcie"

# NVML_TOPOLOGY_* common-ancestor levels, named for where the two GPUs meet.
PCIE_LEVELS: dict[int, str] = {
    0: "same-board",  # INTERNAL: two GPUs on one board
    10: "pcie-switch",  # SINGLE: one PCIe switch between them
    20: "pcie-switches",  # MULTIPLE: several switches, no host bridge
    30: "pcie-host-bridge",  # HOSTBRIDGE: the same host bridge
    40: "numa-node",  # NODE: host bridges within one NUMA node
    50: "cross-socket",  # SYSTEM: across the CPU interconnect (QPI/UPI/Infinity Fabric)
}


class TopologyNvml(Protocol):
    """The part of `Nvml` the probe needs (a test may pass a stand-in)."""

    def handle(self, index: int) -> Any: ...

    def common_ancestor(self, h1: Any, h2: Any) -> int: ...

    def nvlink_p2p_ok(self, h1: Any, h2: Any) -> bool: ...


def pcie_level_name(level: int) -> str:
    """A name for an NVML_TOPOLOGY_* level (`level-N` for one this table does not know)."""
    return PCIE_LEVELS.get(level, f"level-{level}")


@dataclass(frozen=True)
class PairLink:
    """What joins two GPUs: kind "nvlink", "pcie" or None (unknown, with `error`)."""

    gpus: tuple[int, int]
    kind: str | None
    pcie_level: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"gpus": list(self.gpus), "kind": self.kind}
        if self.pcie_level is not None:
            d["pcie_level"] = self.pcie_level
        if self.error is not None:
            d["error"] = self.error
        return d


@dataclass(frozen=True)
class StageLink:
    """The link from stage `from_stage` to the next: its first GPUs' link, and the others'."""

    from_stage: int
    first: PairLink
    others: tuple[PairLink, ...] = ()

    @property
    def to_stage(self) -> int:
        return self.from_stage + 1

    @property
    def kind(self) -> str | None:
        return self.first.kind

    @property
    def pcie_level(self) -> str | None:
        return self.first.pcie_level

    @property
    def mixed(self) -> bool:
        """True when another TP rank's pair is joined differently from the first GPUs."""
        known = [p for p in self.others if p.kind is not None]
        return any((p.kind, p.pcie_level) != (self.kind, self.pcie_level) for p in known)

    def pairs(self) -> tuple[PairLink, ...]:
        return (self.first, *self.others)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "from_stage": self.from_stage,
            "to_stage": self.to_stage,
            "gpus": list(self.first.gpus),
            "kind": self.kind,
            "pcie_level": self.pcie_level,
            "mixed": self.mixed,
        }
        if self.first.error is not None:
            d["error"] = self.first.error
        if self.mixed:
            d["pairs"] = [p.to_dict() for p in self.pairs()]
        return d

    def describe(self) -> str:
        """One line for people: `stage 0 -> 1 (GPU 0 -> 1): pcie, cross-socket`."""
        a, b = self.first.gpus
        head = f"stage {self.from_stage} -> {self.to_stage} (GPU {a} -> {b}): "
        if self.kind is None:
            return head + f"unknown ({self.first.error or 'not checked'})"
        text = head + self.kind + (f", {self.pcie_level}" if self.pcie_level else "")
        if self.mixed:
            kinds = ", ".join(
                f"GPU {p.gpus[0]}->{p.gpus[1]} {p.kind}"
                + (f" {p.pcie_level}" if p.pcie_level else "")
                for p in self.others
            )
            text += f" (the stage's other GPUs differ: {kinds})"
        return text


@dataclass(frozen=True)
class Interconnect:
    """Every stage-to-stage link of one pipeline and their summary."""

    links: tuple[StageLink, ...] = ()

    @property
    def summary(self) -> str | None:
        """`pcie` if any checked pair is PCIe, `nvlink` if all are NVLink, else None."""
        kinds = [p.kind for link in self.links for p in link.pairs()]
        if PCIE in kinds:
            return PCIE
        if kinds and all(k == NVLINK for k in kinds):
            return NVLINK
        return None

    def to_dicts(self) -> list[dict[str, Any]]:
        return [link.to_dict() for link in self.links]


@dataclass
class InterconnectProbe:
    """Checks stage links through NVML; says each (call, error) once in the log, not per probe."""

    nvml: TopologyNvml
    _said: set[tuple[str, str]] = field(default_factory=set)

    def probe(self, topology: Topology) -> Interconnect:
        """The links between consecutive stages of `topology` (no NVML error escapes)."""
        handles: dict[int, Any | NvmlError] = {}
        links = []
        for s in range(topology.pp_size - 1):
            here, there = topology.stages[s], topology.stages[s + 1]
            pairs = [self._pair(a, b, handles) for a, b in zip(here, there, strict=False)]
            links.append(StageLink(s, pairs[0], tuple(pairs[1:])))
        return Interconnect(tuple(links))

    def apply(self, topology: Topology) -> tuple[Topology, Interconnect]:
        """`topology` with `interconnect` set to the probe's summary (kept when unknown)."""
        found = self.probe(topology)
        summary = found.summary
        if summary is None or summary == topology.interconnect:
            return topology, found
        return replace(topology, interconnect=summary), found

    def _pair(self, a: int, b: int, handles: dict[int, Any | NvmlError]) -> PairLink:
        try:
            ha, hb = self._handle(a, handles), self._handle(b, handles)
            if self.nvml.nvlink_p2p_ok(ha, hb):
                return PairLink((a, b), NVLINK)
        except NvmlError as e:
            return PairLink((a, b), None, error=self._say(e, a, b))
        try:
            level = pcie_level_name(self.nvml.common_ancestor(ha, hb))
        except NvmlError as e:
            # Not NVLink, so PCIe; only how far apart the GPUs sit is unknown.
            return PairLink((a, b), PCIE, error=self._say(e, a, b))
        return PairLink((a, b), PCIE, level)

    def _handle(self, gpu: int, handles: dict[int, Any | NvmlError]) -> Any:
        if gpu not in handles:
            try:
                handles[gpu] = self.nvml.handle(gpu)
            except NvmlError as e:
                handles[gpu] = e
        h = handles[gpu]
        if isinstance(h, NvmlError):
            raise h
        return h

    def _say(self, e: NvmlError, a: int, b: int) -> str:
        key = (e.call, code_name(e.code))
        if key not in self._said:
            self._said.add(key)
            log.info("interconnect between GPU %d and GPU %d unknown: %s (said once)", a, b, e)
        return f"{e.call}: {code_name(e.code)}"
