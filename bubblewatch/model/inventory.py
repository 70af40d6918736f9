"""GPU identity: what travels with telemetry so a reader knows which card is which."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpuInfo:
    """One GPU of a host. `index` is NVML's index on that host."""

    index: int
    uuid: str = ""
    name: str = ""
    power_limit_w: float | None = None
    host: str = ""
    pci_bus_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "uuid": self.uuid, "name": self.name}
        if self.power_limit_w is not None:
            d["power_limit_w"] = self.power_limit_w
        if self.host:
            d["host"] = self.host
        if self.pci_bus_id:
            d["pci_bus_id"] = self.pci_bus_id
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GpuInfo:
        index = d.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError(f"gpu 'index' must be a non-negative integer, got {index!r}")
        limit = d.get("power_limit_w")
        if limit is not None and not isinstance(limit, (int, float)):
            raise ValueError(f"gpu 'power_limit_w' must be a number, got {limit!r}")
        return cls(
            index=index,
            uuid=str(d.get("uuid", "")),
            name=str(d.get("name", "")),
            power_limit_w=None if limit is None else float(limit),
            host=str(d.get("host", "")),
            pci_bus_id=str(d.get("pci_bus_id", "")),
        )
