"""Training launchers: which one started a job, its node layout, and the program it runs.

- `torchrun` / `python -m torch.distributed.run` (and the older
  `torch.distributed.launch`): options as `torch/distributed/run.py`
  `get_args_parser` spells them (`--nproc-per-node`/`--nproc_per_node`,
  `--nnodes` N or MIN:MAX, `--node-rank`, `--master-addr`, `--master-port`
  (default 29500), `--rdzv-backend`, `--rdzv-endpoint`, `--rdzv-id`,
  `--standalone`, `-m`, `--no-python`, `--run-path`); workers run
  `python -u [-m] SCRIPT ARGS` with RANK, LOCAL_RANK, WORLD_SIZE,
  LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR/PORT, TORCHELASTIC_RUN_ID.
- `deepspeed` (`deepspeed/launcher/runner.py`, 0.16: `--num_gpus`,
  `--num_nodes`, `--master_addr`, `--master_port` (29500), `--node_rank`,
  `-i/--include`, `-H/--hostfile`) starts `python -u -m
  deepspeed.launcher.launch --world_info=... --master_addr=...
  --master_port=... SCRIPT ARGS`, whose workers run `python -u SCRIPT
  --local_rank=N ARGS` with RANK, LOCAL_RANK, WORLD_SIZE, CROSS_RANK (node),
  CROSS_SIZE (nodes), LOCAL_SIZE, and CUDA_VISIBLE_DEVICES set to the node's
  GPUs (`deepspeed/launcher/launch.py`).
- `accelerate launch` (`--num_processes`, `--num_machines`, `--machine_rank`,
  `--main_process_ip`, `--main_process_port`, `--use_deepspeed`,
  `--deepspeed_config_file`); it runs torch's elastic agent in-process, so
  workers look like torchrun's.
- Slurm `srun` (`-N/--nodes`, `-n/--ntasks`, `--ntasks-per-node`): each task
  is a rank with SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID,
  SLURM_NNODES (often exported as RANK etc. by the job script).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bubblewatch.topology.training._args import Program, is_python, scan_options

# torchrun's boolean options (`action=check_env`), and its two spellings of each option.
_TORCHRUN_BARE = frozenset(
    {"--standalone", "-m", "--module", "--no-python", "--run-path", "--use-env"}
)
_TORCHRUN_ALIASES = {
    f"--{n.replace('-', '_')}": f"--{n}"
    for n in (
        "nproc-per-node",
        "rdzv-backend",
        "rdzv-endpoint",
        "rdzv-id",
        "rdzv-conf",
        "max-restarts",
        "monitor-interval",
        "start-method",
        "event-log-handler",
        "no-python",
        "run-path",
        "log-dir",
        "local-ranks-filter",
        "node-rank",
        "master-addr",
        "master-port",
        "local-addr",
        "logs-specs",
        "numa-binding",
        "signals-to-handle",
        "use-env",
    )
}
_DEEPSPEED_BARE = frozenset(
    {
        "--module",
        "--no_python",
        "--no_local_rank",
        "--no_ssh",
        "--no_ssh_check",
        "--force_multi",
        "--save_pid",
        "--elastic_training",
        "--enable_elastic_training",
        "--bind_cores_to_rank",
    }
)
_ACCELERATE_BARE = frozenset(
    {
        "--multi_gpu",
        "--use_deepspeed",
        "--use_fsdp",
        "--use_megatron_lm",
        "--use_xpu",
        "--cpu",
        "--debug",
        "-m",
        "--module",
        "--no_python",
        "-q",
        "--quiet",
        "--tpu",
        "--same_network",
        "--deepspeed_multinode_launcher",
    }
)
_SRUN_BARE = frozenset(
    {"-l", "--label", "--exclusive", "--overcommit", "-u", "--unbuffered", "-Q", "--quiet"}
)
_SRUN_ALIASES = {"-N": "--nodes", "-n": "--ntasks", "-l": "--label"}


@dataclass(frozen=True)
class LauncherInfo:
    """A launcher's command line as it says how many ranks run where."""

    name: str  # "torchrun", "deepspeed", "accelerate", "srun"
    options: Mapping[str, str | bool]
    program: Program | None
    nproc_per_node: int | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def world_size(self) -> int | None:
        if self.nproc_per_node is None:
            return None
        return self.nproc_per_node * (self.nnodes or 1)


def recognise_launcher(argv: Sequence[str]) -> LauncherInfo | None:
    """The launcher a command line runs, or None when it is not one."""
    args = _strip_wrappers(argv)
    if not args:
        return None
    prog = os.path.basename(args[0])
    rest = list(args[1:])
    if is_python(prog):
        module, script_args = _python_target(rest)
        if module in ("torch.distributed.run", "torch.distributed.launch"):
            return _torchrun(script_args)
        if module in ("deepspeed.launcher.runner", "deepspeed.launcher.launch"):
            return _deepspeed(script_args)
        if module == "accelerate.commands.launch":
            return _accelerate(script_args)
        if module is not None:
            return None
        if script_args and os.path.basename(script_args[0]) in ("torchrun", "deepspeed"):
            prog, rest = os.path.basename(script_args[0]), script_args[1:]
        elif script_args and os.path.basename(script_args[0]) == "accelerate":
            prog, rest = "accelerate", script_args[1:]
        else:
            return None
    if prog == "torchrun":
        return _torchrun(rest)
    if prog == "deepspeed":
        return _deepspeed(rest)
    if prog == "accelerate" and rest[:1] == ["launch"]:
        return _accelerate(rest[1:])
    if prog == "srun":
        return _srun(rest)
    return None


def _strip_wrappers(argv: Sequence[str]) -> list[str]:
    args = list(argv)
    while args:
        prog = os.path.basename(args[0])
        if prog == "env":
            args = args[1:]
            while args and "=" in args[0] and not args[0].startswith("-"):
                args = args[1:]
        elif prog == "nohup":
            args = args[1:]
        else:
            break
    return args


def _python_target(rest: list[str]) -> tuple[str | None, list[str]]:
    """(-m module, its args) or (None, [script, args...]) after python's own options."""
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "-m" and i + 1 < len(rest):
            return rest[i + 1], rest[i + 2 :]
        if a.startswith("-m") and len(a) > 2:
            return a[2:], rest[i + 1 :]
        if a in ("-X", "-W"):
            i += 2
            continue
        if not a.startswith("-"):
            return None, rest[i:]
        i += 1
    return None, []


def _program(positional: str | None, rest: Sequence[str], *, module: bool) -> Program | None:
    if positional is None:
        return None
    if module:
        return Program(None, positional, tuple(rest))
    if is_python(positional):
        from bubblewatch.topology.training._args import python_program

        return python_program([positional, *rest])
    return Program(positional, None, tuple(rest))


def _int(v: str | bool | None) -> int | None:
    if not isinstance(v, str):
        return None
    try:
        return int(v)
    except ValueError:
        return None


def _str(v: str | bool | None) -> str | None:
    return v if isinstance(v, str) else None


def _torchrun(args: Sequence[str]) -> LauncherInfo:
    s = scan_options(args, bare=_TORCHRUN_BARE, aliases=_TORCHRUN_ALIASES)
    o = s.options
    notes: list[str] = []
    nproc = _int(o.get("--nproc-per-node", "1"))
    if nproc is None:
        notes.append(f"--nproc-per-node {o.get('--nproc-per-node')!r}: counted from the ranks")
    nnodes_text = o.get("--nnodes", "1")
    nnodes = None
    if isinstance(nnodes_text, str):
        lo, _, hi = nnodes_text.partition(":")
        nnodes = _int(hi or lo)
        if hi and lo != hi:
            notes.append(f"elastic --nnodes {nnodes_text}: up to {hi} nodes")
    addr = o.get("--master-addr")
    port = _int(o.get("--master-port"))
    endpoint = o.get("--rdzv-endpoint")
    if isinstance(endpoint, str) and endpoint and o.get("--rdzv-backend") not in (None, "static"):
        host, _, p = endpoint.rpartition(":")
        addr, port = (host or endpoint), _int(p)
    if o.get("--standalone") is True:
        addr, port = "localhost", None
    module = o.get("-m") is True or o.get("--module") is True
    return LauncherInfo(
        name="torchrun",
        options=o,
        program=_program(s.positional, s.rest, module=module),
        nproc_per_node=nproc,
        nnodes=nnodes,
        node_rank=_int(o.get("--node-rank", "0")),
        master_addr=addr if isinstance(addr, str) else "127.0.0.1",
        master_port=29500 if port is None and addr is None else port,
        notes=tuple(notes),
    )


def _deepspeed(args: Sequence[str]) -> LauncherInfo:
    s = scan_options(args, bare=_DEEPSPEED_BARE)
    o = s.options
    gpus = _int(o.get("--num_gpus") or o.get("--num_accelerators"))
    include = o.get("-i") or o.get("--include")
    if gpus is None and isinstance(include, str) and "@" not in include:
        _, _, slots = include.partition(":")
        gpus = len(slots.split(",")) if slots else None
    nodes = _int(o.get("--num_nodes"))
    return LauncherInfo(
        name="deepspeed",
        options=o,
        program=_program(s.positional, s.rest, module=o.get("--module") is True),
        nproc_per_node=gpus,
        nnodes=nodes if nodes is not None and nodes > 0 else None,
        node_rank=_int(o.get("--node_rank")),
        master_addr=_str(o.get("--master_addr")),
        master_port=_int(o.get("--master_port")) or 29500,
    )


def _accelerate(args: Sequence[str]) -> LauncherInfo:
    # accelerate accepts `--num-processes` for `--num_processes`: one spelling here.
    norm = [_underscored(a) if a.startswith("--") else a for a in args]
    s = scan_options(norm, bare=_ACCELERATE_BARE)
    o = s.options
    procs = _int(o.get("--num_processes"))
    machines = _int(o.get("--num_machines")) or 1
    return LauncherInfo(
        name="accelerate",
        options=o,
        program=_program(s.positional, s.rest, module=o.get("-m") is True or "--module" in o),
        nproc_per_node=None if procs is None else max(procs // machines, 1),
        nnodes=machines,
        node_rank=_int(o.get("--machine_rank")),
        master_addr=_str(o.get("--main_process_ip")),
        master_port=_int(o.get("--main_process_port")),
    )


def _srun(args: Sequence[str]) -> LauncherInfo:
    expanded: list[str] = []
    for a in args:
        # `-N2` and `-n16`: the short option glued to its value.
        if len(a) > 2 and a[:2] in ("-N", "-n", "-c") and not a.startswith("--"):
            expanded.extend([a[:2], a[2:]])
        else:
            expanded.append(a)
    s = scan_options(expanded, bare=_SRUN_BARE, aliases=_SRUN_ALIASES)
    o = s.options
    nodes = _int(o.get("--nodes"))
    ntasks = _int(o.get("--ntasks"))
    per_node = _int(o.get("--ntasks-per-node"))
    if per_node is None and ntasks is not None and nodes:
        per_node = ntasks // nodes
    program: Program | None = None
    if s.positional is not None:
        program = _program(s.positional, s.rest, module=False)
    return LauncherInfo(
        name="srun",
        options=o,
        program=program,
        nproc_per_node=per_node,
        nnodes=nodes,
    )


def _underscored(arg: str) -> str:
    name, eq, value = arg.partition("=")
    return "--" + name[2:].replace("-", "_") + eq + value
