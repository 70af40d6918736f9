"""`bubblewatch` entry point: the table of subcommands, and dispatch.

Each subcommand is registered here by name, with its one-line help and the
module that implements it. That module is imported only when the subcommand
is chosen (to run it, or for its `--help`): `bubblewatch --version` and
`bubblewatch --help` import argparse and this file, nothing of the analysis
(tests/cli/test_startup.py holds this).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import bubblewatch
from bubblewatch.errors import InputError


@dataclass(frozen=True)
class Command:
    """A subcommand: `module`'s function `add` builds its parser and sets the `func` it runs."""

    name: str
    help: str
    module: str
    add: str = "add_arguments"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add: Callable[[argparse.ArgumentParser], None] = getattr(
            importlib.import_module(self.module), self.add
        )
        add(parser)


COMMANDS = (
    Command(
        "analyze",
        "diagnose pipeline bubbles in recorded telemetry (trace, nvidia-smi, dcgmi, "
        "profiler traces, Prometheus)",
        "bubblewatch.cli.analyze",
    ),
    Command(
        "compare",
        "compare two recordings (before and after a fix) and say if the fix worked",
        "bubblewatch.cli.compare",
    ),
    Command(
        "diagnose",
        "sample the GPUs for a while, then say whether the pipeline has bubbles",
        "bubblewatch.cli.diagnose",
    ),
    Command(
        "engine-state",
        "read a running engine's live settings back; say whether a live update took",
        "bubblewatch.cli.engine_state",
    ),
    Command(
        "fleet",
        "pipelines that span hosts: list them, or diagnose one across all its hosts "
        "(from Prometheus)",
        "bubblewatch.cli.fleet",
    ),
    Command("record", "record live GPU telemetry (NVML) to a trace file", "bubblewatch.cli.record"),
    Command("rules", "check and test recommendation rules", "bubblewatch.cli.rules"),
    Command(
        "run",
        "run the daemon: sample continuously, diagnose, export metrics, send alerts",
        "bubblewatch.cli.run",
    ),
    Command(
        "simulate",
        "simulate a pipelined LLM engine and write what NVML would have reported",
        "bubblewatch.cli.simulate",
    ),
    Command(
        "scenarios",
        "list the built-in simulator scenarios",
        "bubblewatch.cli.simulate",
        "add_scenarios_arguments",
    ),
    Command(
        "topology",
        "show which GPU runs which pipeline stage, and how it was found",
        "bubblewatch.cli.topology",
    ),
)


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser whose arguments are added the first time it parses."""

    def __init__(self, *args: Any, command: Command | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._command = command

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        command, self._command = self._command, None
        if command is not None:
            command.add_arguments(self)
        return super().parse_known_args(args, namespace)


def build_parser(*, lazy: bool = False) -> argparse.ArgumentParser:
    """The whole parser; `lazy`: each subcommand's arguments are added when it is chosen."""
    parser = argparse.ArgumentParser(
        prog="bubblewatch",
        description="Find pipeline bubbles in LLM inference servers and say how to fix them.",
    )
    parser.add_argument("--version", action="version", version=bubblewatch.__version__)
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="log verbosity on stderr (default: warning)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, command=command if lazy else None)
        if not lazy:
            command.add_arguments(p)
    return parser


# numpy's BLAS (OpenBLAS in its wheels, MKL in some builds) starts a thread per core, and
# each spins a while after every call: bubblewatch's matrix products are small (the
# nvidia-smi parser's digit columns, the detector's correlations), and on `analyze` of an
# hour of 8 GPUs at 10 Hz the second thread spent 0.12 s beside the main thread's 0.9 s
# (BENCHMARKS.md, "The last pieces: rule trees, readers, BLAS threads"). One thread, unless
# the user says otherwise; set before numpy is first imported.
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread() -> None:
    """Ask numpy's BLAS for one thread where the environment names no number."""
    for name in BLAS_THREAD_VARS:
        os.environ.setdefault(name, "1")


def main(argv: Sequence[str] | None = None) -> int:
    one_blas_thread()
    parser = build_parser(lazy=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        rc: int = func(args)
    except InputError as e:
        print(f"bubblewatch: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return rc
