"""SIGHUP: a checked new configuration applied to the running daemon, or the old one kept.

`reload.check_reload` reads and checks the whole new configuration first; only
then does `_apply` swap the rules, the web settings, the alert receivers, the
sampling and the deadlines (`reload.diff_configs` says what changed). A bad
reload keeps the old state and sets `bubblewatch_config_last_reload_successful` to 0.
"""

from __future__ import annotations

import logging

from bubblewatch.daemon.loop.reload import (
    Checked,
    ConfigDiff,
    apply_diff,
    check_reload,
    diff_configs,
)
from bubblewatch.daemon.loop.state import SHUTDOWN_ALERT_TIMEOUT_S
from bubblewatch.daemon.loop.work import TickWork
from bubblewatch.daemon.pipelines.tracker import change_keep_s, set_peak_horizon
from bubblewatch.errors import InputError

log = logging.getLogger("bubblewatch.daemon")


class ConfigReload(TickWork):
    """Reloading on SIGHUP; it re-applies sampling as a pass's work does."""

    # -- SIGHUP --
    def _reload(self) -> None:
        self.notifier.reloading()
        log.info("reloading configuration", extra={"kv": {"file": str(self._path)}})
        try:
            new = check_reload(self._path, self._overrides, self._env, current=self.cfg)
        except InputError as e:  # logged and counted; everything stays as it was
            self.reloads.invalid(str(e))
        else:
            diff = self._apply(new)
            self.reloads.loaded(diff, new.cfg, self.clock.time(), rules=new.rule_count)
        self.notifier.ready(status=(self._status or "reloaded") + self.reloads.state.status_note())

    def _apply(self, new: Checked) -> ConfigDiff:
        diff = diff_configs(self.cfg, new.cfg, simulated=self.source.simulated)
        cfg = diff.cfg
        self.rules = new.rules  # one reference swap: the next analysis uses the new set
        self.server.set_web(new.web)
        self.dispatcher = apply_diff(
            diff,
            self.source,
            self.dispatcher,
            env=self._env,
            alert_timeout_s=SHUTDOWN_ALERT_TIMEOUT_S,
        )
        if diff.sampling or diff.ring:
            self._set_sampling(cfg)
        now = self.clock.monotonic()
        self._analysis.reschedule(cfg.analysis.interval_s, now)
        self._discovery.reschedule(cfg.topology.rediscover_interval_s, now)
        if diff.topology:
            self._discovery.now(now)
        self.pipelines.changes.keep_s = change_keep_s(cfg)
        set_peak_horizon(self.pipelines, cfg.analysis.peak_horizon_s)
        self.cfg = cfg
        return diff
