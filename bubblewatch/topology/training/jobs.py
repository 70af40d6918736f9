"""A training job's part on this host, and how it is shown to the rest of bubblewatch.

`TrainingJob` holds the layout (bubblewatch.topology.training.layout) and the
observed rank -> GPU map; `topologies()` cuts it into pipelines (one per
data-parallel replica), `engine_config()` into the EngineConfig the facts,
metrics and fixes read. Jobs are found by `procs.discover_training` (live) or
`handgiven.training_from_cmdline` (a command line given by hand).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from bubblewatch.model.topology import Topology
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.redact import redact_text
from bubblewatch.topology.training._args import flag_values, python_program
from bubblewatch.topology.training.launchers import recognise_launcher
from bubblewatch.topology.training.layout import ParallelLayout

_LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "")


@dataclass(frozen=True)
class TrainingJob:
    """One training job's part on this host: its layout and where its ranks run."""

    layout: ParallelLayout
    rank_gpus: Mapping[int, int]  # global rank -> host GPU index, for ranks on this host
    argv: tuple[str, ...]  # redacted: the command a fix is rendered onto
    env: Mapping[str, str]  # redacted, allow-listed
    method: str
    launcher_pid: int | None = None
    rank_pids: Mapping[int, int] = field(default_factory=dict)
    node_rank: int = 0
    nnodes: int = 1
    master: str | None = None  # "host:port" every rank dials
    run_id: str | None = None  # TORCHELASTIC_RUN_ID, or slurm-<job>.<step>
    cuda_visible_devices: tuple[str, ...] | None = None

    @property
    def pipeline_id(self) -> str:
        host = (self.master or "").rpartition(":")[0] if self.master else ""
        if host and host not in _LOOPBACK:
            return f"{self.layout.framework}@{self.master}"
        if self.run_id and self.run_id.startswith("slurm-"):
            return f"{self.layout.framework}@{self.run_id}"  # one Slurm step: alike on every node
        if self.launcher_pid is None and not self.rank_pids:
            return self.layout.framework
        pid = self.launcher_pid if self.launcher_pid is not None else min(self.rank_pids.values())
        return f"{self.layout.framework}:pid{pid}"

    def topologies(self, warnings: list[str] | None = None) -> list[tuple[Topology, int]]:
        """One topology per data-parallel replica of a pipeline (with its first global stage).

        A job with no pipeline is one topology of one stage holding all its
        GPUs here: data parallel, in phase, not a pipeline.
        """
        lay = self.layout
        source = f"{self.method}:{self.launcher_pid}" if self.launcher_pid else self.method

        def topo(stages: tuple[tuple[int, ...], ...], pipeline_id: str) -> Topology:
            return Topology(
                stages=stages,
                engine=lay.framework,
                source=source,
                pipeline_id=pipeline_id,
                argv=self.argv,
                env=dict(self.env),
            )

        if not self.rank_gpus:
            return []
        if not lay.is_pipeline:
            gpus = tuple(g for _, g in sorted(self.rank_gpus.items()))
            return [(topo((gpus,), self.pipeline_id), 0)]
        replicas: dict[int, dict[int, list[tuple[int, int, int]]]] = {}
        for rank, gpu in self.rank_gpus.items():
            c = lay.coords(rank)
            replicas.setdefault(c["dp"], {}).setdefault(c["pp"], []).append((c["cp"], c["tp"], gpu))
        out: list[tuple[Topology, int]] = []
        for d in sorted(replicas):
            stages = replicas[d]
            order = sorted(stages)
            if order != list(range(order[0], order[-1] + 1)) and warnings is not None:
                warnings.append(
                    f"{self.pipeline_id}: this host holds stages {order} of replica {d}, not a "
                    "contiguous range; they are shown in order"
                )
            suffix = f"/dp{d}" if lay.dp > 1 else ""
            placed = tuple(tuple(g for _, _, g in sorted(stages[s])) for s in order)
            out.append((topo(placed, self.pipeline_id + suffix), order[0]))
        return out

    def engine_config(self) -> EngineConfig:
        """The job as the rest of bubblewatch sees an engine: sizes, command line, layout."""
        return training_engine(
            self.layout,
            self.argv,
            self.env,
            nnodes=self.nnodes,
            node_rank=self.node_rank,
            master=self.master,
            cuda_visible_devices=self.cuda_visible_devices,
        )


def training_engine(
    lay: ParallelLayout,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    nnodes: int = 1,
    node_rank: int = 0,
    master: str | None = None,
    cuda_visible_devices: tuple[str, ...] | None = None,
) -> EngineConfig:
    """An EngineConfig for a training layout (argv and env already redacted)."""
    info = recognise_launcher(argv)
    prog = (info.program if info is not None else None) or python_program(argv)
    return EngineConfig(
        name=lay.framework,
        pp_size=lay.pp,
        tp_size=lay.tp,
        ep_size=lay.ep,
        dp_size=lay.dp,
        nnodes=nnodes,
        node_rank=node_rank,
        dist_init_addr=master,
        flags={} if prog is None else flag_values(prog.args),
        argv=tuple(argv),
        env=dict(env),
        cuda_visible_devices=cuda_visible_devices,
        training=lay,
    )


def redacted_layout(layout: ParallelLayout, rank_gpus: Mapping[int, int]) -> ParallelLayout:
    """The layout with this host's GPU ranks, its texts redacted like every command line."""
    return replace(
        layout,
        gpu_ranks={g: r for r, g in rank_gpus.items()},
        config_file=None if layout.config_file is None else redact_text(layout.config_file),
        sources={k: redact_text(v) for k, v in layout.sources.items()},
        notes=tuple(redact_text(n) for n in layout.notes),
    )
