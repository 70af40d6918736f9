"""Pipeline topology: which GPU belongs to which pipeline stage.

A topology may come from the engine's command line, a static file, or the
detector's own inference; `source` says which. Secrets never live here: argv
and env are redacted before a Topology is built from them.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bubblewatch.errors import BubblewatchError
from bubblewatch.limits import LIMITS_DOC, MAX_GPU_INDEX, TOPOLOGY_MAX_GPUS


class TopologyError(BubblewatchError, ValueError):
    """A topology that cannot be right (a GPU in two stages, sizes that disagree)."""


@dataclass(frozen=True)
class Topology:
    """Stages in pipeline order; each stage is the GPUs (one TP group) that run it."""

    stages: tuple[tuple[int, ...], ...]
    engine: str | None = None
    source: str = "unknown"
    pipeline_id: str = ""
    interconnect: str | None = None
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        seen: dict[int, int] = {}
        for s, gpus in enumerate(self.stages):
            if not gpus:
                raise TopologyError(f"stage {s} has no GPUs")
            for g in gpus:
                if g in seen:
                    raise TopologyError(f"GPU {g} is in stage {seen[g]} and stage {s}")
                seen[g] = s

    @property
    def pp_size(self) -> int:
        return len(self.stages)

    @property
    def tp_size(self) -> int:
        return max((len(s) for s in self.stages), default=0)

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(g for stage in self.stages for g in stage)

    def stage_of(self, gpu: int) -> int | None:
        for s, gpus in enumerate(self.stages):
            if gpu in gpus:
                return s
        return None

    @classmethod
    def from_sizes(
        cls,
        pp_size: int,
        tp_size: int = 1,
        *,
        base_gpu_id: int = 0,
        gpu_id_step: int = 1,
        **kwargs: Any,
    ) -> Topology:
        """SGLang's placement: (pp_rank, tp_rank) on GPU base + pp_rank * tp + tp_rank * step.

        This is what `sglang.srt.entrypoints.engine` computes for a single node; with
        a step of 1 it is simply rank r = pp_rank * tp + tp_rank on GPU base + r.
        """
        if pp_size < 1 or tp_size < 1:
            raise TopologyError(f"pp_size and tp_size must be >= 1, got {pp_size} and {tp_size}")
        if gpu_id_step < 1 or base_gpu_id < 0:
            raise TopologyError("base_gpu_id must be >= 0 and gpu_id_step >= 1")
        if pp_size * tp_size > TOPOLOGY_MAX_GPUS:
            raise TopologyError(
                f"pp_size {pp_size} x tp_size {tp_size} is more than {TOPOLOGY_MAX_GPUS} GPUs "
                f"(see {LIMITS_DOC})"
            )
        highest = base_gpu_id + (pp_size - 1) * tp_size + (tp_size - 1) * gpu_id_step
        if highest > MAX_GPU_INDEX:
            raise TopologyError(
                f"the layout reaches GPU {highest}; GPU indices go up to {MAX_GPU_INDEX} "
                f"(see {LIMITS_DOC})"
            )
        stages = tuple(
            tuple(base_gpu_id + p * tp_size + t * gpu_id_step for t in range(tp_size))
            for p in range(pp_size)
        )
        return cls(stages=stages, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "pp_size": self.pp_size,
            "tp_size": self.tp_size,
            "stages": [list(s) for s in self.stages],
            "source": self.source,
        }
        if self.engine:
            d["engine"] = self.engine
        if self.pipeline_id:
            d["pipeline_id"] = self.pipeline_id
        if self.interconnect:
            d["interconnect"] = self.interconnect
        if self.argv:
            d["argv"] = list(self.argv)
        if self.env:
            d["env"] = dict(self.env)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Topology:
        """Build from a trace header or topology file; errors name the field."""
        stages_raw = d.get("stages")
        if stages_raw is None:
            pp = d.get("pp_size")
            tp = d.get("tp_size", 1)
            if not isinstance(pp, int) or not isinstance(tp, int):
                raise TopologyError("topology needs 'stages' (list of GPU lists) or 'pp_size'")
            base = _opt_int(d, "base_gpu_id", 0)
            step = _opt_int(d, "gpu_id_step", 1)
            return cls.from_sizes(pp, tp, base_gpu_id=base, gpu_id_step=step, **_extras(d))
        if not isinstance(stages_raw, Sequence) or isinstance(stages_raw, (str, bytes)):
            raise TopologyError("topology 'stages' must be a list of lists of GPU indices")
        stages: list[tuple[int, ...]] = []
        for i, raw in enumerate(stages_raw):
            st = [raw] if isinstance(raw, int) and not isinstance(raw, bool) else raw
            if not isinstance(st, Sequence) or not all(
                isinstance(g, int) and not isinstance(g, bool) and 0 <= g <= MAX_GPU_INDEX
                for g in st
            ):
                raise TopologyError(
                    f"topology 'stages[{i}]' must be a list of GPU indices "
                    f"(0..{MAX_GPU_INDEX}), got {reprlib.repr(st)}"
                )
            stages.append(tuple(st))
        topo = cls(stages=tuple(stages), **_extras(d))
        for key, value in (("pp_size", topo.pp_size), ("tp_size", topo.tp_size)):
            given = d.get(key)
            if given is not None and given != value:
                raise TopologyError(f"topology '{key}' is {given} but 'stages' implies {value}")
        return topo


def _opt_int(d: Mapping[str, Any], key: str, default: int) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise TopologyError(f"topology '{key}' must be an integer, got {v!r}")
    return v


def _extras(d: Mapping[str, Any]) -> dict[str, Any]:
    argv = d.get("argv", ())
    env = d.get("env", {})
    if not isinstance(argv, Sequence) or isinstance(argv, str):
        raise TopologyError("topology 'argv' must be a list of strings")
    if not isinstance(env, Mapping):
        raise TopologyError("topology 'env' must be a mapping")
    engine = d.get("engine")
    interconnect = d.get("interconnect")
    return {
        "engine": None if engine is None else str(engine),
        "source": str(d.get("source", "static")),
        "pipeline_id": str(d.get("pipeline_id", "")),
        "interconnect": None if interconnect is None else str(interconnect),
        "argv": tuple(str(a) for a in argv),
        "env": {str(k): str(v) for k, v in env.items()},
    }


def index_ranges(values: Sequence[int]) -> str:
    """GPU or stage indices as runs: (4, 5, 6, 7, 9) -> '4-7, 9' (sorted input)."""
    parts: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(parts)
