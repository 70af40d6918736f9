"""The config's `alerting` section: state directory, receivers (secrets from files), retries."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bubblewatch.daemon.config.yamlsrc import Section
from bubblewatch.limits import (
    ALERT_MAX_QUEUE,
    BACKOFF_MIN_S,
    DAY_S,
    INITIAL_BACKOFF_MAX_S,
    RECEIVER_MAX_TIMEOUT_S,
    RECEIVER_MIN_TIMEOUT_S,
    SECRET_FILE_MAX_BYTES,
    LimitError,
    read_capped,
)
from bubblewatch.sinks.alerts.dispatcher import RECEIVER_TYPES, ReceiverConfig
from bubblewatch.sinks.alerts.target import ReceiverFieldError
from bubblewatch.sinks.alerts.worker import RetryPolicy

# Reads an optional path-valued key of a section, relative to the config file.
PathOf = Callable[[Section, str], Path | None]


@dataclass(frozen=True)
class AlertingConfig:
    state_dir: Path = Path("state")
    repeat_interval_s: float = 4 * 3600.0
    instance: str = ""
    receivers: tuple[ReceiverConfig, ...] = ()


def _default_state_dir(env: Mapping[str, str]) -> Path:
    # systemd's StateDirectory= sets $STATE_DIRECTORY (colon-separated if several).
    sd = env.get("STATE_DIRECTORY", "").split(":")[0]
    if sd:
        return Path(sd)
    if env.get("BUBBLEWATCH_STATE_DIR"):
        return Path(env["BUBBLEWATCH_STATE_DIR"])
    xdg = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "bubblewatch"


def read_alerting(s: Section, env: Mapping[str, str], path_of: PathOf) -> AlertingConfig:
    """The `alerting` section; ConfigError names the file, line and key of a bad value."""
    state_dir = path_of(s, "state_dir") or _default_state_dir(env)
    repeat = s.duration_s("repeat_interval", 4 * 3600.0)
    instance = s.str_("instance", "") or socket.gethostname()
    defaults = _retry(s, RetryPolicy())
    max_queue = s.int_("max_queue", 1000, minimum=1, maximum=ALERT_MAX_QUEUE)
    receivers: list[ReceiverConfig] = []
    names: dict[str, int] = {}
    for r in s.sections("receivers"):
        name = r.str_("name", "")
        if not name:
            raise r.error("name", "every receiver needs a 'name'")
        if name in names:
            raise r.error("name", f"receiver name {name!r} is already used (line {names[name]})")
        names[name] = r.line_of("name")
        rtype = r.choice("type", "webhook", RECEIVER_TYPES)
        url = _secret_value(r, "url", path_of, required=True) or ""
        secret = _secret_value(r, "secret", path_of, required=False)
        if secret and rtype != "webhook":
            raise r.error("secret", f"only 'webhook' receivers sign requests, not {rtype!r}")
        try:
            cfg = ReceiverConfig(
                name, rtype, url, secret, r.str_map("headers"),
                r.int_("max_queue", max_queue, minimum=1, maximum=ALERT_MAX_QUEUE),
                _retry(r, defaults),
            )  # fmt: skip
        except ReceiverFieldError as e:
            if e.key is not None:
                raise r.section(e.field).error(e.key, str(e)) from None
            key = "url_file" if e.field == "url" and "url" not in r else e.field
            raise r.error(key, str(e)) from None
        r.finish()
        receivers.append(cfg)
    s.finish()
    return AlertingConfig(state_dir, repeat, instance, tuple(receivers))


def _retry(s: Section, base: RetryPolicy) -> RetryPolicy:
    timeout_s = s.duration_s(
        "timeout", base.timeout_s,
        minimum_s=RECEIVER_MIN_TIMEOUT_S, maximum_s=RECEIVER_MAX_TIMEOUT_S,
    )  # fmt: skip
    initial_s = s.duration_s(
        "initial_backoff", base.initial_backoff_s,
        minimum_s=BACKOFF_MIN_S, maximum_s=INITIAL_BACKOFF_MAX_S,
    )  # fmt: skip
    max_s = s.duration_s(
        "max_backoff", base.max_backoff_s, minimum_s=BACKOFF_MIN_S, maximum_s=DAY_S
    )
    if max_s < initial_s:
        raise s.error(
            "max_backoff", f"must be at least initial_backoff ({initial_s:g}s), got {max_s:g}s"
        )
    return RetryPolicy(timeout_s, initial_s, max_s)


def _secret_value(s: Section, key: str, path_of: PathOf, *, required: bool) -> str | None:
    """`key` inline or `key_file` (contents, stripped): never both. Values are never echoed."""
    inline = s.opt_str(key)
    fpath: Path | None = path_of(s, f"{key}_file")
    if inline and fpath:
        raise s.error(f"{key}_file", f"give either '{key}' or '{key}_file', not both")
    if fpath:
        try:
            value = read_capped(fpath, SECRET_FILE_MAX_BYTES).decode("utf-8").strip()
        except OSError as e:
            raise s.error(f"{key}_file", f"cannot read {fpath}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise s.error(f"{key}_file", f"{fpath} is not UTF-8 text") from None
        except LimitError as e:
            raise s.error(f"{key}_file", e.reason) from None
        if not value:
            raise s.error(f"{key}_file", f"{fpath} is empty")
        return value
    if required and not inline:
        raise s.error(key, f"needs '{key}' or '{key}_file'")
    return inline
