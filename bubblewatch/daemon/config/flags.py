"""The `bubblewatch run` flags: one per config key, declared once in `OVERRIDES`.

Flags follow node_exporter's style (`--web.listen-address`, `--sampling.interval`)
and win over the file; a bad flag value is reported against the flag.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from bubblewatch.daemon.config.listen import DEFAULT_LISTEN_ADDRESS, DEFAULT_MAX_REQUESTS
from bubblewatch.daemon.config.yamlsrc import ConfigError, Section
from bubblewatch.daemon.logging import FORMATS, LEVELS
from bubblewatch.durations import parse_duration_s


@dataclass(frozen=True)
class Override:
    """A command-line flag that sets the config key `key` (dotted)."""

    flag: str
    key: str
    kind: Literal["str", "duration", "int", "path", "size"]
    help: str


OVERRIDES: tuple[Override, ...] = (
    Override("--web.listen-address", "web.listen_address", "str",
             f"address to serve /metrics on (default {DEFAULT_LISTEN_ADDRESS})"),
    Override("--web.config.file", "web.config_file", "path",
             "exporter-toolkit web config (TLS, basic auth)"),
    Override("--web.telemetry-path", "web.telemetry_path", "str",
             "path of the metrics endpoint (default /metrics)"),
    Override("--web.max-requests", "web.max_requests", "int",
             f"requests answered at once; more get a fast 503 (default {DEFAULT_MAX_REQUESTS})"),
    Override("--sampling.interval", "sampling.interval", "duration",
             "time between GPU samples (default 1s)"),
    Override("--sampling.history", "sampling.history", "duration",
             "telemetry kept in memory per GPU (default 10m)"),
    Override("--analysis.interval", "analysis.interval", "duration",
             "time between diagnoses (default 10s)"),
    Override("--analysis.window", "analysis.window", "duration",
             "telemetry each diagnosis looks at (default 60s)"),
    Override("--analysis.peak-horizon", "analysis.peak_horizon", "duration",
             "load history fill knobs are sized for (default 1d)"),
    Override("--topology.rediscover-interval", "topology.rediscover_interval", "duration",
             "time between engine/topology discoveries (default 60s)"),
    Override("--topology.file", "topology.static_file", "path",
             "static topology file instead of discovery"),
    Override("--topology.first-stage", "topology.first_stage", "int",
             "global stage of this host's first stage (multi-host pipelines; default: discovered)"),
    Override("--alerting.state-dir", "alerting.state_dir", "path",
             "directory of the alert queues (default $STATE_DIRECTORY)"),
    Override("--alerting.repeat-interval", "alerting.repeat_interval", "duration",
             "re-send a firing alert this often (default 4h)"),
    Override("--record", "record.path", "path",
             "also write everything sampled to this trace file (.jsonl or .jsonl.gz)"),
    Override("--record.max-size", "record.max_size", "size",
             "start a new trace file when the current one reaches this size (e.g. 256MB)"),
    Override("--record.max-age", "record.max_age", "duration",
             "start a new trace file when the current one is this old (e.g. 1h)"),
    Override("--record.keep", "record.keep", "int",
             "rotated trace files kept, the newest (default 0: all)"),
    Override("--simulate", "simulate", "str",
             "run on this simulated scenario instead of GPUs"),
    Override("--log.level", "log.level", "str", f"one of {', '.join(LEVELS)} (default info)"),
    Override("--log.format", "log.format", "str", f"one of {', '.join(FORMATS)} (default logfmt)"),
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--config` and every override flag to a subcommand's parser."""
    parser.add_argument("--config", "--config.file", dest="config_file", metavar="FILE",
                        help="YAML configuration (see packaging/bubblewatch.yml)")  # fmt: skip
    for o in OVERRIDES:
        parser.add_argument(o.flag, dest=_dest(o.flag), metavar=o.kind.upper(), help=o.help)


def overrides_from_args(args: argparse.Namespace) -> dict[str, str]:
    """{flag: value} for the override flags given on the command line."""
    out: dict[str, str] = {}
    for o in OVERRIDES:
        v = getattr(args, _dest(o.flag), None)
        if v is not None:
            out[o.flag] = str(v)
    return out


def _dest(flag: str) -> str:
    # Prefixed so `--log.level` cannot collide with the top-level `--log-level` (dest log_level).
    return "override_" + flag.lstrip("-").replace(".", "_").replace("-", "_")


def apply_overrides(root: Section, overrides: Mapping[str, str]) -> None:
    """Set each flag's value in the config tree `root`; ConfigError names a bad flag."""
    by_flag = {o.flag: o for o in OVERRIDES}
    for flag, text in overrides.items():
        o = by_flag.get(flag)
        if o is None:
            raise ConfigError(f"unknown flag {flag}", path="command line")
        value: object = text
        if o.kind == "duration":
            try:
                value = parse_duration_s(text)
            except ValueError as e:
                raise ConfigError(str(e), path="command line", field=flag) from None
        elif o.kind == "int":
            try:
                value = int(text)
            except ValueError:
                raise ConfigError(f"expected an integer, got {text!r}", path="command line",
                                  field=flag) from None  # fmt: skip
        root.set_override(o.key, value, flag)
