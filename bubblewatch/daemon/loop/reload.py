"""Loading the daemon's settings whole (at start and on SIGHUP), and what a reload changes.

Reload is all or nothing: `check_reload` reads the config file, the web
config and every rule file (and a newly named simulated scenario) and raises
InputError if any is bad, before anything is swapped in. `diff_configs` is a
pure comparison of the old and new configuration; `apply_diff` applies what
concerns logging, alert receivers and the simulated scenario, the daemon the
rest (sampling, ring, schedules). A setting a running daemon cannot change
(`RESTART_ONLY`) keeps its old value in the configuration in force, so the
daemon never shows a value it does not use, and every later reload of the
same file names it again (`reloads.ReloadLedger` logs and counts it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bubblewatch.daemon.config.file import DaemonConfig, load_config
from bubblewatch.daemon.config.web import WebSettings, load_web_config
from bubblewatch.daemon.logging import configure_logging
from bubblewatch.daemon.loop.alerting import open_dispatcher
from bubblewatch.daemon.sources.protocol import DaemonSource
from bubblewatch.errors import InputError
from bubblewatch.rules import RuleEngine, shipped_rules_dir
from bubblewatch.sinks.alerts import AlertDispatcher

log = logging.getLogger("bubblewatch.daemon")

# Settings a running daemon cannot change, and why: a reload keeps their old values.
RESTART_ONLY = {
    "web.listen_address": "the endpoint keeps listening on the socket it was started with",
    "web.telemetry_path": "the endpoint's routes are fixed when it starts",
    "record": "the trace recorder keeps the file and rotation it was started with",
    "web.max_requests": "the endpoint's worker threads are started once",
}
SOURCE_KIND = "simulate"  # switching between simulated and real GPUs opens another source
SOURCE_KIND_WHY = "switching between simulated and real GPUs opens another source"


def setting(cfg: object, key: str) -> Any:
    """The value of a dotted key (`web.listen_address`) of a configuration."""
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _with_setting(cfg: Any, key: str, value: object) -> Any:
    head, _, rest = key.partition(".")
    inner = _with_setting(getattr(cfg, head), rest, value) if rest else value
    return replace(cfg, **{head: inner})


def rule_paths(cfg: DaemonConfig) -> list[str | Path]:
    """The shipped rules plus the configured extra files."""
    return [shipped_rules_dir(), *cfg.rules.files]


def load_settings(
    path: Path | None, overrides: Mapping[str, str], env: Mapping[str, str] | None
) -> tuple[DaemonConfig, WebSettings]:
    """The config file with the flags applied, and the web config it names."""
    cfg = load_config(path, overrides, env=env)
    web = load_web_config(cfg.web.config_file) if cfg.web.config_file else WebSettings()
    return cfg, web


def load_rule_engine(cfg: DaemonConfig) -> tuple[RuleEngine, int]:
    """A rule engine holding every configured rule, and how many; InputError if any is bad."""
    engine = RuleEngine()
    result = engine.reload(rule_paths(cfg))
    if not result.ok:
        raise InputError(result.error or "rules failed to load", path="rules")
    return engine, result.rules


@dataclass(frozen=True)
class Checked:
    """A new configuration whose every part loaded: safe to swap in."""

    cfg: DaemonConfig
    web: WebSettings
    rules: RuleEngine
    rule_count: int


def check_reload(
    path: Path | None,
    overrides: Mapping[str, str],
    env: Mapping[str, str] | None,
    *,
    current: DaemonConfig,
) -> Checked:
    """Read everything a reload needs; InputError (file, line, key) if any part is bad."""
    cfg, web = load_settings(path, overrides, env)
    rules, count = load_rule_engine(cfg)
    if cfg.simulate and cfg.simulate != current.simulate:
        from bubblewatch.sim import load_scenario

        load_scenario(cfg.simulate)  # a bad name or file fails the reload, not the switch
    return Checked(cfg, web, rules, count)


@dataclass(frozen=True)
class ConfigDiff:
    """What a reload from one configuration to another changes.

    `cfg` is the configuration in force afterwards: the new one, except that
    each key in `needs_restart` keeps its old value (`RESTART_ONLY`, and
    `simulate` when the change would switch between simulated and real GPUs:
    `source_kind`).
    """

    cfg: DaemonConfig
    needs_restart: tuple[str, ...] = ()  # keys whose new values apply only after a restart
    logging: bool = False
    sampling: bool = False
    ring: bool = False  # the ring buffers' capacities
    alerting: bool = False
    scenario: str | None = None  # switch the simulator to this scenario
    source_kind: bool = False
    topology: bool = False


def diff_configs(old: DaemonConfig, new: DaemonConfig, *, simulated: bool) -> ConfigDiff:
    """Compare `old` with `new`; `simulated`: the daemon plays a simulated scenario now."""
    restart = tuple(key for key in RESTART_ONLY if setting(old, key) != setting(new, key))
    cfg, scenario, source_kind = new, None, False
    for key in restart:
        cfg = _with_setting(cfg, key, setting(old, key))
    if new.simulate != old.simulate:
        if simulated and new.simulate:
            scenario = new.simulate
        else:
            source_kind = True
            restart = (*restart, SOURCE_KIND)
            cfg = replace(cfg, simulate=old.simulate)
    return ConfigDiff(
        cfg,
        needs_restart=restart,
        logging=(old.log.level, old.log.format) != (new.log.level, new.log.format),
        sampling=old.sampling != new.sampling,
        ring=(old.sampling, old.analysis.window_s) != (new.sampling, new.analysis.window_s),
        alerting=old.alerting != new.alerting,
        scenario=scenario,
        source_kind=source_kind,
        topology=new.topology != old.topology,
    )


def apply_diff(
    diff: ConfigDiff,
    source: DaemonSource,
    dispatcher: AlertDispatcher,
    *,
    env: Mapping[str, str] | None,
    alert_timeout_s: float,
) -> AlertDispatcher:
    """Apply a reload's logging, alert receivers and simulated scenario; the dispatcher in force."""
    cfg = diff.cfg
    if diff.logging:
        configure_logging(
            cfg.log.level,
            cfg.log.format,
            env=env,
            ratelimit_interval_s=cfg.log.ratelimit_interval_s,
        )
    if diff.alerting:
        dispatcher.close(alert_timeout_s)
        dispatcher = open_dispatcher(cfg)
        log.info(
            "alert receivers reloaded",
            extra={"kv": {"receivers": ",".join(r.name for r in cfg.alerting.receivers)}},
        )
    if diff.scenario is not None and source.switch(diff.scenario):
        log.info("switching simulated scenario", extra={"kv": {"to": diff.scenario}})
    return dispatcher
