"""What the configuration reloads did, for the log, the metrics and sd_notify's STATUS.

Each reload has one result: `applied` (every change in force), `refused`
(the files loaded and the rest applied, but they change a setting a running
daemon cannot change: it keeps its old value until a restart, and is said per
setting in the log and in `bubblewatch_config_restart_required{setting}`) or
`invalid` (a file did not load: nothing changed). The main loop records each;
scrapes read `state`, an immutable view swapped in whole.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from bubblewatch.daemon.config.file import DaemonConfig
from bubblewatch.daemon.loop.reload import (
    RESTART_ONLY,
    SOURCE_KIND,
    SOURCE_KIND_WHY,
    ConfigDiff,
    setting,
)

log = logging.getLogger("bubblewatch.daemon")

RESULTS = ("applied", "refused", "invalid")


@dataclass(frozen=True)
class ReloadState:
    """The reloads so far. `ok`: the last (re)load loaded; `restart_required`: settings the
    files change that keep their old values until a restart."""

    ok: bool = True
    success_timestamp_s: float | None = None
    counts: tuple[tuple[str, int], ...] = tuple((r, 0) for r in RESULTS)
    restart_required: tuple[str, ...] = ()

    def counted(self, result: str) -> tuple[tuple[str, int], ...]:
        return tuple((r, n + (r == result)) for r, n in self.counts)

    def status_note(self) -> str:
        """What sd_notify's STATUS adds while a reload is not wholly in force ('' when it is)."""
        if not self.ok:
            return "; last reload invalid, previous configuration kept (see the log)"
        if self.restart_required:
            return f"; restart required for {', '.join(self.restart_required)}"
        return ""


class ReloadLedger:
    """Records each reload's result, logs what was refused, and holds the `state` scrapes see."""

    def __init__(self, loaded_at_s: float) -> None:
        self.state = ReloadState(success_timestamp_s=loaded_at_s)

    def invalid(self, error: str) -> None:
        """A file did not load: the old configuration and rules stay in force."""
        log.error(
            "reload failed; keeping the previous configuration and rules",
            extra={"kv": {"result": "invalid", "error": error}},
        )
        s = self.state
        self.state = replace(s, ok=False, counts=s.counted("invalid"))

    def loaded(self, diff: ConfigDiff, wanted: DaemonConfig, now_s: float, *, rules: int) -> str:
        """The files loaded and `diff` was applied; logs each setting kept; the result."""
        for key in diff.needs_restart:
            log.warning(
                "setting not applied: it changes only at a restart; "
                "the previous value stays in force",
                extra={"kv": {"setting": key, "why": _why(key), **_values(diff.cfg, wanted, key)}},
            )
        result = "refused" if diff.needs_restart else "applied"
        kv: dict[str, object] = {"result": result, "rules": rules}
        if diff.needs_restart:
            kv["restart_required"] = ",".join(diff.needs_restart)
        log.log(
            logging.WARNING if diff.needs_restart else logging.INFO,
            "configuration reloaded",
            extra={"kv": kv},
        )
        s = self.state
        self.state = replace(
            s,
            ok=True,
            success_timestamp_s=now_s,
            counts=s.counted(result),
            restart_required=diff.needs_restart,
        )
        return result


def _why(key: str) -> str:
    return SOURCE_KIND_WHY if key == SOURCE_KIND else RESTART_ONLY[key]


def _values(in_force: DaemonConfig, wanted: DaemonConfig, key: str) -> dict[str, object]:
    """The value kept and the file's, for plain settings (not whole sections such as `record`)."""
    kept, new = setting(in_force, key), setting(wanted, key)
    if all(v is None or isinstance(v, (str, int, float)) for v in (kept, new)):
        return {"in_force": kept, "file": new}
    return {}
