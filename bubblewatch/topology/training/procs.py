"""Find training jobs among the GPU processes, and place their ranks on GPUs and stages.

Every rank of a training job is a process whose environment says which rank
it is (bubblewatch.topology.training.rankenv); NVML says which GPU each
process uses. So the rank -> GPU map is observed, not inferred, and the rank
-> stage map is the framework's own numbering (layout.coords). Ranks are
grouped into jobs by their launcher process (torchrun, deepspeed, accelerate)
or, without one on this host (srun), by their rendezvous address and size.
The job's layout comes from one rank's command line and config files, read
through `/proc/PID/cwd` and `/proc/PID/root` as the job sees them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bubblewatch.errors import InputError
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.topology.gpumap import visible_devices
from bubblewatch.topology.procfs import ProcReader, ProcUnavailable
from bubblewatch.topology.redact import redact_argv, redact_env
from bubblewatch.topology.training._args import python_program
from bubblewatch.topology.training.context import JobContext
from bubblewatch.topology.training.files import FileSource, NoFiles, ProcFiles
from bubblewatch.topology.training.frameworks import parse_layout
from bubblewatch.topology.training.jobs import TrainingJob, redacted_layout
from bubblewatch.topology.training.launchers import LauncherInfo, recognise_launcher
from bubblewatch.topology.training.layout import LayoutError
from bubblewatch.topology.training.rankenv import RankEnv, rank_env

MAX_DEPTH = 16


@dataclass
class _Rank:
    pid: int
    argv: list[str]
    env: dict[str, str]
    info: RankEnv
    gpus: set[int] = field(default_factory=set)


def discover_training(
    processes: Mapping[int, Sequence[int]],
    gpus: Sequence[GpuInfo],
    reader: ProcReader,
    warnings: list[str],
    *,
    proc_root: str | None,
    skip_gpus: set[int] | None = None,
) -> list[TrainingJob]:
    """Training jobs behind NVML's GPU processes (GPUs in `skip_gpus` are someone else's)."""
    ranks: dict[int, _Rank] = {}
    for gpu in sorted(processes):
        if skip_gpus and gpu in skip_gpus:
            continue
        for pid in processes[gpu]:
            r = _rank_process(reader, pid, warnings)
            if r is not None:
                ranks.setdefault(r.pid, r).gpus.add(gpu)
    return _jobs(ranks, gpus, reader, warnings, proc_root=proc_root, method="proc")


def scan_training(
    reader: ProcReader, gpus: Sequence[GpuInfo], warnings: list[str], *, proc_root: str | None
) -> list[TrainingJob]:
    """Training ranks found in the whole process table (no NVML process list)."""
    ranks: dict[int, _Rank] = {}
    for pid in reader.pids():
        r = _rank_process(reader, pid, [], climb=False)
        if r is not None and r.pid not in ranks:
            ranks[r.pid] = r
    # Keep only the topmost process of each rank (its data-loader children share the env).
    tops = {pid: r for pid, r in ranks.items() if not _has_rank_parent(reader, r, ranks)}
    return _jobs(tops, gpus, reader, warnings, proc_root=proc_root, method="proc-scan")


def _has_rank_parent(reader: ProcReader, r: _Rank, ranks: Mapping[int, _Rank]) -> bool:
    try:
        parent = reader.ppid(r.pid)
    except ProcUnavailable:
        return False
    p = ranks.get(parent) if parent is not None else None
    return p is not None and p.info.rank == r.info.rank and p.info.world_size == r.info.world_size


def _environ(reader: ProcReader, pid: int, warnings: list[str] | None) -> dict[str, str] | None:
    try:
        return reader.environ(pid)
    except ProcUnavailable as e:
        if warnings is not None:
            warnings.append(str(e))
        return None


def _rank_process(
    reader: ProcReader, pid: int, warnings: list[str], *, climb: bool = True
) -> _Rank | None:
    """The process (pid or an ancestor) that is one rank of a job, topmost of its copies."""
    found: _Rank | None = None
    cur: int | None = pid
    for depth in range(MAX_DEPTH):
        if cur is None:
            break
        env = _environ(reader, cur, warnings if depth == 0 else None)
        if env is None:
            break
        info = rank_env(env)
        if info.is_rank:
            if found is not None and (info.rank, info.world_size) != (
                found.info.rank,
                found.info.world_size,
            ):
                break
            try:
                argv = reader.cmdline(cur)
            except ProcUnavailable:
                break
            # Above the rank only a python copy of it (a forked parent) is the rank too,
            # not the shell (`srun sh -c "python ..."`) that started it.
            if found is not None and python_program(argv) is None:
                break
            found = _Rank(cur, argv, env, info)
        elif found is not None:
            break
        if not climb and found is not None:
            break
        try:
            cur = reader.ppid(cur)
        except ProcUnavailable:
            break
    return found


def _launcher(reader: ProcReader, pid: int) -> tuple[int, list[str], LauncherInfo] | None:
    """The topmost launcher above a rank (the command the user typed)."""
    best: tuple[int, list[str], LauncherInfo] | None = None
    cur: int | None = pid
    for _ in range(MAX_DEPTH):
        try:
            cur = reader.ppid(cur) if cur is not None else None
            if cur is None:
                break
            argv = reader.cmdline(cur)
        except ProcUnavailable:
            break
        info = recognise_launcher(argv)
        if info is not None:
            safe = list(redact_argv(argv))
            best = (cur, safe, recognise_launcher(safe) or info)
        elif best is not None:
            break
    return best


def _jobs(
    ranks: Mapping[int, _Rank],
    gpus: Sequence[GpuInfo],
    reader: ProcReader,
    warnings: list[str],
    *,
    proc_root: str | None,
    method: str,
) -> list[TrainingJob]:
    groups: dict[object, list[_Rank]] = {}
    launchers: dict[object, tuple[int, list[str], LauncherInfo] | None] = {}
    for r in sorted(ranks.values(), key=lambda r: (r.info.rank or 0, r.pid)):
        hit = _launcher(reader, r.pid)
        key: object = (
            ("launcher", hit[0])
            if hit is not None
            else (
                "env",
                r.info.master_addr,
                r.info.master_port,
                r.info.world_size,
                r.info.run_id,
            )
        )
        groups.setdefault(key, []).append(r)
        launchers.setdefault(key, hit)
    jobs: list[TrainingJob] = []
    for key, members in groups.items():
        job = _job(members, launchers[key], gpus, warnings, proc_root=proc_root, method=method)
        if job is not None:
            jobs.append(job)
    return jobs


def _job(
    members: list[_Rank],
    launcher: tuple[int, list[str], LauncherInfo] | None,
    gpus: Sequence[GpuInfo],
    warnings: list[str],
    *,
    proc_root: str | None,
    method: str,
) -> TrainingJob | None:
    rep = members[0]
    where = f"/proc/{rep.pid}/cmdline"
    info = None if launcher is None else launcher[2]
    worlds = {m.info.world_size for m in members if m.info.world_size is not None}
    if len(worlds) > 1:
        warnings.append(f"{where}: ranks of one job disagree on WORLD_SIZE {sorted(worlds)}")
    world = max(worlds) if worlds else (info.world_size if info is not None else None)
    # Parsed from the redacted command line: no secret can reach a message or the layout.
    program = python_program(list(redact_argv(rep.argv))) or (
        info.program if info is not None else None
    )
    if world is None or program is None:
        warnings.append(f"{where}: a training rank whose world size or program is unknown")
        return None
    files: FileSource = NoFiles() if proc_root is None else ProcFiles(proc_root, rep.pid)
    launcher_name = (
        info.name if info is not None else ("srun" if "SLURM_PROCID" in rep.env else "unknown")
    )
    ctx = JobContext(
        program=program,
        env=rep.env,
        files=files,
        world_size=world,
        launcher=launcher_name,
        where=where,
        launcher_options={} if info is None else dict(info.options),
    )
    try:
        layout = parse_layout(ctx, warnings)
    except (InputError, LayoutError) as e:
        warnings.append(str(e))
        return None
    for m in members:
        for p in m.info.problems:
            warnings.append(f"/proc/{m.pid}/environ: {p}")
    rank_gpus: dict[int, int] = {}
    rank_pids: dict[int, int] = {}
    for m in members:
        rank = m.info.rank
        if rank is None or rank >= world:
            warnings.append(f"/proc/{m.pid}/environ: rank {rank} outside the world of {world}")
            continue
        gpu = _gpu_of(m, gpus, warnings)
        if gpu is not None:
            rank_gpus[rank] = gpu
            rank_pids[rank] = m.pid
    env = rep.info
    argv = launcher[1] if launcher is not None else rep.argv
    master = None
    if env.master_addr:
        master = f"{env.master_addr}:{env.master_port}" if env.master_port else env.master_addr
    elif info is not None and info.master_addr:
        master = f"{info.master_addr}:{info.master_port}" if info.master_port else info.master_addr
    local = env.local_world_size or (info.nproc_per_node if info is not None else None)
    node_rank = env.node_rank
    if node_rank is None:
        node_rank = (info.node_rank if info is not None else None) or (
            (env.rank or 0) // local if local else 0
        )
    nnodes = (
        env.nnodes
        or (info.nnodes if info is not None else None)
        or (max(world // local, 1) if local else 1)
    )
    return TrainingJob(
        layout=redacted_layout(layout, rank_gpus),
        rank_gpus=rank_gpus,
        argv=redact_argv(argv),
        env=redact_env(rep.env),
        method=method,
        launcher_pid=None if launcher is None else launcher[0],
        rank_pids=rank_pids,
        node_rank=node_rank,
        nnodes=nnodes,
        master=master,
        run_id=env.run_id,
        cuda_visible_devices=env.cuda_visible_devices,
    )


def _gpu_of(m: _Rank, gpus: Sequence[GpuInfo], warnings: list[str]) -> int | None:
    """The GPU a rank runs on: NVML's word when it names one, else LOCAL_RANK's device."""
    if len(m.gpus) == 1:
        return next(iter(m.gpus))
    vis = visible_devices(m.info.cuda_visible_devices, gpus)
    by_local = (
        vis.indices[m.info.local_rank]
        if m.info.local_rank is not None and m.info.local_rank < len(vis.indices)
        else None
    )
    if m.gpus:
        if by_local in m.gpus:
            return by_local
        warnings.append(f"process {m.pid} (rank {m.info.rank}) uses GPUs {sorted(m.gpus)}")
        return min(m.gpus)
    return by_local
