"""A training job's parallel layout and where each rank sits in it.

Frameworks number their ranks over a grid of parallel dimensions; which
dimension varies fastest is the framework's own choice, so the layout keeps
it (`order`, fastest first) and `coords(rank)` decodes a global rank exactly
as the framework's process groups do:

- Megatron-LM / Megatron-Core: `RankGenerator(order="tp-cp-ep-dp-pp")`
  (`megatron/core/parallel_state.py`, core 0.9-0.14; the decoder generator
  has ep = 1), i.e. rank = tp + T*(cp + C*(dp + D*pp)); `--use-tp-pp-dp-mapping`
  gives "tp-cp-ep-pp-dp" (0.14, `megatron/training/initialize.py`).
- DeepSpeed pipelines: `ProcessTopology` enumerates the cartesian product of
  its axes, last axis fastest (`deepspeed/runtime/pipe/topology.py`, 0.16):
  `PipeDataParallelTopology` axes [pipe, data], `PipeModelDataParallelTopology`
  axes [pipe, data, model].
- torchtitan: `ParallelDims` builds its mesh over ["pp", "dp_replicate",
  "dp_shard", "cp", "tp"] (0.1.0) / ("pp", "batch", "cp", "tp") (0.2.x),
  last dimension fastest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bubblewatch.errors import BubblewatchError

if TYPE_CHECKING:
    from bubblewatch.model.schedule import Expectation, PipelineSchedule

AXES = ("tp", "cp", "dp", "pp")

FRAMEWORKS = ("megatron", "nemo", "deepspeed", "torchtitan", "torch")


class LayoutError(BubblewatchError, ValueError):
    """Sizes that cannot describe the job (a product that is not the world size)."""


@dataclass(frozen=True)
class ParallelLayout:
    """A training job's parallel sizes, batch and schedule, with where each came from.

    `order` lists the rank-numbering axes fastest first (a subset of tp, cp,
    dp, pp; absent axes have size 1). `micro_batches` is m, the micro-batches
    each pipeline runs per optimizer step. `sources` maps a field name to the
    flag, config key or rule that set it.
    """

    framework: str
    launcher: str
    world_size: int
    pp: int = 1
    tp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    virtual_stages: int = 1
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    micro_batches: int | None = None
    schedule: str | None = None
    order: tuple[str, ...] = ("tp", "cp", "dp", "pp")
    num_layers: int | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    config_file: str | None = None
    version_note: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # Host GPU -> global rank for the ranks discovered on this host (empty: not known).
    gpu_ranks: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("world_size", "pp", "tp", "dp", "cp", "ep", "virtual_stages"):
            v = getattr(self, name)
            if v < 1:
                raise LayoutError(f"{name} must be >= 1, got {v}")
        if self.pp * self.tp * self.dp * self.cp != self.world_size:
            raise LayoutError(
                f"pp {self.pp} x tp {self.tp} x dp {self.dp} x cp {self.cp} "
                f"is not the world size {self.world_size}"
            )
        unknown = [a for a in self.order if a not in AXES]
        if unknown or len(set(self.order)) != len(self.order):
            raise LayoutError(f"bad rank order {self.order!r}")
        for a in AXES:
            if a not in self.order and getattr(self, a) != 1:
                raise LayoutError(f"rank order {self.order!r} has no {a} but {a} is not 1")

    @property
    def is_pipeline(self) -> bool:
        return self.pp > 1

    def size(self, axis: str) -> int:
        return int(getattr(self, axis))

    def coords(self, rank: int) -> dict[str, int]:
        """The rank's index along every axis, as the framework numbers ranks."""
        if not 0 <= rank < self.world_size:
            raise LayoutError(f"rank {rank} is outside the world of {self.world_size}")
        out = dict.fromkeys(AXES, 0)
        rest = rank
        for axis in self.order:
            n = self.size(axis)
            out[axis] = rest % n
            rest //= n
        return out

    def stage_of(self, rank: int) -> int:
        """The pipeline stage (pp rank) of a global rank."""
        return self.coords(rank)["pp"]

    def first_stage_on(self, gpus: tuple[int, ...]) -> int:
        """The global stage of the first of these GPUs' stages (0 when their ranks are unknown)."""
        stages = [self.stage_of(self.gpu_ranks[g]) for g in gpus if g in self.gpu_ranks]
        return min(stages, default=0)

    def expectation(self) -> Expectation | None:
        """The schedule's expected bubble (bubblewatch.model.schedule), if m is known."""
        from bubblewatch.model.schedule import expectation, resolve_schedule

        schedule = resolve_schedule(self.framework, self.schedule, self.pp, self.virtual_stages)
        if schedule is None or self.micro_batches is None:
            return None
        return expectation(schedule, self.pp, self.micro_batches)

    def pipeline_schedule(self) -> PipelineSchedule | None:
        """The schedule the detector judges the measured bubble against (None: no pipeline)."""
        from bubblewatch.model.schedule import PipelineSchedule

        e = self.expectation()
        return None if e is None else PipelineSchedule.from_expectation(e)

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "launcher": self.launcher,
            "world_size": self.world_size,
            "pp_size": self.pp,
            "tp_size": self.tp,
            "dp_size": self.dp,
            "cp_size": self.cp,
            "ep_size": self.ep,
            "virtual_stages": self.virtual_stages,
            "micro_batch_size": self.micro_batch_size,
            "global_batch_size": self.global_batch_size,
            "micro_batches": self.micro_batches,
            "schedule": self.schedule,
            "order": "-".join(self.order),
            "num_layers": self.num_layers,
            "first_stage_layers": self.first_stage_layers,
            "last_stage_layers": self.last_stage_layers,
            "config_file": self.config_file,
            "version_note": self.version_note,
            "sources": dict(self.sources),
            "notes": list(self.notes),
            "gpu_ranks": {str(g): r for g, r in sorted(self.gpu_ranks.items())},
            "expected_bubble": None if (e := self.expectation()) is None else e.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ParallelLayout:
        """Back from `to_dict` (a trace header); LayoutError names the bad field."""
        try:
            return cls(
                framework=str(d["framework"]),
                launcher=str(d.get("launcher") or "unknown"),
                world_size=int(d["world_size"]),
                pp=int(d.get("pp_size", 1)),
                tp=int(d.get("tp_size", 1)),
                dp=int(d.get("dp_size", 1)),
                cp=int(d.get("cp_size", 1)),
                ep=int(d.get("ep_size", 1)),
                virtual_stages=int(d.get("virtual_stages", 1)),
                micro_batch_size=_opt_int(d.get("micro_batch_size")),
                global_batch_size=_opt_int(d.get("global_batch_size")),
                micro_batches=_opt_int(d.get("micro_batches")),
                schedule=None if d.get("schedule") is None else str(d["schedule"]),
                order=tuple(str(d.get("order", "tp-cp-dp-pp")).split("-")),
                num_layers=_opt_int(d.get("num_layers")),
                first_stage_layers=_opt_int(d.get("first_stage_layers")),
                last_stage_layers=_opt_int(d.get("last_stage_layers")),
                config_file=None if d.get("config_file") is None else str(d["config_file"]),
                version_note=None if d.get("version_note") is None else str(d["version_note"]),
                sources={str(k): str(v) for k, v in dict(d.get("sources") or {}).items()},
                notes=tuple(str(n) for n in d.get("notes") or ()),
                gpu_ranks={int(g): int(r) for g, r in dict(d.get("gpu_ranks") or {}).items()},
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, LayoutError):
                raise
            raise LayoutError(f"training layout: {type(e).__name__}: {e}") from e


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)
