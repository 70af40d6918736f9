"""Walk the process tree from a GPU process up to the engine launcher that started it.

SGLang and vLLM run their GPU work in spawned scheduler/worker processes:
the engine's flags are on an ancestor's command line. Process titles such as
`sglang::scheduler_PP1_TP0` or `VLLM::Worker_PP1_TP0`, met on the way, give
the ranks the engine itself assigned. Unreadable processes become warnings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from bubblewatch import engines
from bubblewatch.topology._launchers import detect_engine
from bubblewatch.topology.procfs import ProcReader, ProcUnavailable

MAX_PARENT_DEPTH = 16
_TITLE_RANK = re.compile(r"(?:^|[_\s:])(PP|TP|DP)(\d+)(?=$|[_\s])", re.IGNORECASE)


@dataclass(frozen=True)
class TitleRanks:
    pp: int | None
    tp: int | None
    dp: int | None


def title_ranks(argv: Sequence[str]) -> TitleRanks | None:
    """Ranks from an engine process title (`sglang::scheduler_PP1_TP0`), if it is one."""
    titles = tuple(
        e.command.process_title.lower() for e in engines.all_engines() if e.command.process_title
    )
    if not argv or not argv[0].lower().startswith(titles):
        return None
    found = {k.upper(): int(v) for k, v in _TITLE_RANK.findall(argv[0])}
    return TitleRanks(found.get("PP"), found.get("TP"), found.get("DP"))


@dataclass
class Launcher:
    pid: int
    argv: list[str]
    gpus: set[int] = field(default_factory=set)
    titles: dict[int, TitleRanks] = field(default_factory=dict)  # gpu -> ranks


class Walker:
    """Follows PIDs up to their engine launcher, remembering what went wrong."""

    def __init__(self, reader: ProcReader, warnings: list[str]) -> None:
        self.reader = reader
        self.warnings = warnings
        self._cache: dict[int, list[str] | None] = {}

    def argv(self, pid: int, *, quiet: bool = False) -> list[str] | None:
        if pid not in self._cache:
            try:
                self._cache[pid] = self.reader.cmdline(pid)
            except ProcUnavailable as e:
                if not quiet:
                    self.warnings.append(str(e))
                self._cache[pid] = None
        return self._cache[pid]

    def parent(self, pid: int, *, quiet: bool = False) -> int | None:
        try:
            return self.reader.ppid(pid)
        except ProcUnavailable as e:
            if not quiet:
                self.warnings.append(str(e))
            return None

    def launcher(self, pid: int) -> tuple[int, list[str], TitleRanks | None] | None:
        """The topmost ancestor (or pid itself) whose command line launches an engine."""
        seen: set[int] = set()
        cur: int | None = pid
        ranks: TitleRanks | None = None
        found: tuple[int, list[str]] | None = None
        depth = 0
        while cur is not None and cur not in seen and depth < MAX_PARENT_DEPTH:
            seen.add(cur)
            depth += 1
            # Above a launcher we only look for a forked copy: failures there are no news.
            argv = self.argv(cur, quiet=found is not None)
            if argv is None:
                break
            if ranks is None:
                ranks = title_ranks(argv)
            if detect_engine(argv) is not None:
                # Forked workers keep the launcher's argv: keep climbing while it repeats.
                if found is not None and argv != found[1]:
                    break
                found = (cur, argv)
            elif found is not None:
                break
            cur = self.parent(cur, quiet=found is not None)
        return None if found is None else (found[0], found[1], ranks)

    def scan(self) -> list[Launcher]:
        """Every engine launcher in the whole process table (no NVML process list), by PID."""
        tops: dict[int, Launcher] = {}
        for pid in self.reader.pids():
            argv = self.argv(pid)
            if argv is None or detect_engine(argv) is None:
                continue
            hit = self.launcher(pid)
            if hit is not None:
                tops.setdefault(hit[0], Launcher(hit[0], hit[1]))
        return sorted(tops.values(), key=lambda e: e.pid)
