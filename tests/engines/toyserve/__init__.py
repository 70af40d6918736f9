"""A toy serving engine, built as docs/engines.md says: one package and its flag table.

`toyserve serve MODEL --pp N --tp N --slot-cap N --max-seqs N --port N`; the
per-slot cap was `--legacy-slot-cap` in 1.0. Its scheduler keeps `pp + 1`
slots, each up to the cap. `tests/engines/test_toy_engine.py` registers it
and follows it through discovery, load metrics, facts and a rendered fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bubblewatch.engines.base import (
    CommandLine,
    Engine,
    Fixes,
    FlagReader,
    Launcher,
    LiveApi,
    LoadMetrics,
    NoScheduler,
    option_table,
)


def _read(r: FlagReader) -> Mapping[str, Any]:
    return {
        "pp_max_micro_batch_size": r.int_("slot_cap", None, minimum=1),
        "max_running_requests": r.int_("max_running_requests", None, minimum=1),
        "port": r.port(9000),
        "host": "127.0.0.1",
        "metrics_enabled": True,
    }


@dataclass(frozen=True)
class ToyScheduler(NoScheduler):
    """`pp + 1` slots, each up to the cap: what it does not say is NoScheduler's."""

    def micro_batch_slots(self, pp_size: int, depth: int) -> int | None:
        return pp_size + 1 if pp_size > 1 else None

    def default_micro_batch_cap(self, max_running: int, pp_size: int) -> int | None:
        return max(max_running // (pp_size + 1), 1)


ENGINE = Engine(
    name="toyserve",
    title="ToyServe",
    command=CommandLine(
        package="toyserve",
        launchers=(Launcher("toyserve", subcommand="serve"),),
        options=option_table(
            ("pp_size", "int", ("--pp",), False),
            ("tp_size", "int", ("--tp",), False),
            ("slot_cap", "int", ("--slot-cap", "--legacy-slot-cap"), False),
            ("max_running_requests", "int", ("--max-seqs",), False),
            ("port", "int", ("--port",), False),
        ),
        renamed={"--slot-cap": ("--legacy-slot-cap",)},
        default_port=9000,
        layer_partition_env="TOYSERVE_LAYERS",
        read=_read,
    ),
    metrics=LoadMetrics(running="toyserve:running", queued="toyserve:waiting"),
    live=LiveApi(version_paths=("/version",), set_path="/settings"),
    scheduler=ToyScheduler(),
    fixes=Fixes(cap_flag="--slot-cap"),
    flag_data=__name__,
)
