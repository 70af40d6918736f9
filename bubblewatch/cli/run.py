"""`bubblewatch run`: the daemon (sampling, diagnosis, Prometheus exporter, alert webhooks)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bubblewatch.daemon.config.flags import add_arguments as add_daemon_arguments
from bubblewatch.daemon.config.flags import overrides_from_args


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Sample every GPU (or a simulated scenario) into a ring buffer, diagnose "
        "the pipeline over a sliding window, serve Prometheus metrics and send alert "
        "webhooks. SIGHUP reloads the configuration and rules; SIGTERM stops. "
        "Configuration reference: docs/daemon.md."
    )
    add_daemon_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from bubblewatch.daemon.loop.run import Daemon

    path = Path(args.config_file) if args.config_file else None
    overrides = overrides_from_args(args)
    if "--record" in overrides:
        # A trace named on the command line is relative to where the command runs.
        overrides["--record"] = str(Path(overrides["--record"]).expanduser().absolute())
    daemon = Daemon.open(path, overrides)
    return 1 if daemon is None else daemon.run()
