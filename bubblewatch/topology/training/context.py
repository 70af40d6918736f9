"""What every framework parser is given: the program, a rank's environment, file access."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bubblewatch.topology.training._args import Program
from bubblewatch.topology.training.files import FileSource


@dataclass(frozen=True)
class JobContext:
    """One job as seen from one of its ranks (or from a launch command given by hand).

    `env` is the raw environment and stays inside the parsers: only the
    redacted, allow-listed copy is ever stored. `where` names the source in
    errors (`/proc/123/cmdline`, `--engine-cmdline`).
    """

    program: Program
    env: Mapping[str, str]
    files: FileSource
    world_size: int
    launcher: str
    where: str
    launcher_options: Mapping[str, str | bool] = field(default_factory=dict)


def script_dir(ctx: JobContext) -> str | None:
    """The directory of the script the job runs (Hydra resolves config paths from it)."""
    import os

    if ctx.program.script is None:
        return None
    return os.path.dirname(ctx.program.script) or "."
