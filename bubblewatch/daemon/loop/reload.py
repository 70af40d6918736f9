"""Loading the daemon's settings whole (at start and on SIGHUP), and what a reload changes.

Reload is all or nothing: `check_reload` reads the config file, the web
config and every rule file (and a newly named simulated scenario) and raises
InputError if any is bad, before anything is swapped in. `diff_configs` is a
pure comparison of the old and new configuration; `apply_diff` applies what
concerns logging, alert receivers and the simulated scenario, the daemon the
rest (sampling, ring, schedules).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from bubblewatch.daemon.config.file import DaemonConfig, load_config
from bubblewatch.daemon.config.web import WebSettings, load_web_config
from bubblewatch.daemon.logging import configure_logging
from bubblewatch.daemon.loop.alerting import open_dispatcher
from bubblewatch.daemon.sources.protocol import DaemonSource
from bubblewatch.errors import InputError
from bubblewatch.rules import RuleEngine, shipped_rules_dir
from bubblewatch.sinks.alerts import AlertDispatcher

log = logging.getLogger("bubblewatch.daemon")


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
    it keeps the old `simulate` when the change would switch between simulated
    and real GPUs (`source_kind`), which needs a restart.
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
    restart = tuple(
        key
        for key, a, b in (
            ("web.listen_address", old.web.listen_address, new.web.listen_address),
            ("web.telemetry_path", old.web.telemetry_path, new.web.telemetry_path),
            ("record", old.record, new.record),
            ("web.max_requests", old.web.max_requests, new.web.max_requests),
        )
        if a != b
    )
    cfg, scenario, source_kind = new, None, False
    if new.simulate != old.simulate:
        if simulated and new.simulate:
            scenario = new.simulate
        else:
            source_kind = True
            cfg = replace(new, simulate=old.simulate)
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
    for key in diff.needs_restart:
        log.warning("setting needs a restart to take effect", extra={"kv": {"key": key}})
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
    elif diff.source_kind:
        log.warning("switching between simulated and real GPUs needs a restart")
    return dispatcher
