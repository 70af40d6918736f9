"""The daemon's configuration: one YAML file, every option overridable by a flag.

Flags follow node_exporter's style (`--web.listen-address`, `--sampling.interval`);
`OVERRIDES` declares them once. Everything is validated at start (and on
reload); an error names the file, line and key, or the flag. packaging/bubblewatch.yml
is the commented example, docs/daemon.md the reference.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bubblewatch.daemon.logging import FORMATS, LEVELS
from bubblewatch.daemon.yamlsrc import ConfigError, Section, _LineDict, load_yaml, parse_duration_s
from bubblewatch.sinks.alerts.dispatcher import RECEIVER_TYPES, ReceiverConfig
from bubblewatch.sinks.alerts.worker import RetryPolicy

DEFAULT_LISTEN_ADDRESS = ":9842"
MIN_SAMPLING_INTERVAL_S = 0.1  # GPM samples must be > 100 ms apart (DESIGN.md section 4)


@dataclass(frozen=True)
class WebConfig:
    listen_address: str = DEFAULT_LISTEN_ADDRESS
    config_file: Path | None = None
    telemetry_path: str = "/metrics"


@dataclass(frozen=True)
class SamplingConfig:
    interval_s: float = 1.0
    history_s: float = 600.0


@dataclass(frozen=True)
class AnalysisConfig:
    interval_s: float = 10.0
    window_s: float = 60.0


@dataclass(frozen=True)
class TopologyConfig:
    rediscover_interval_s: float = 60.0
    static_file: Path | None = None
    pipeline_id: str = ""
    # Global stage index of this host's first stage, for pipelines that span hosts
    # (docs/fleet.md): the `stage` labels this daemon exports start here.
    first_stage: int = 0


@dataclass(frozen=True)
class AlertingConfig:
    state_dir: Path = Path("state")
    repeat_interval_s: float = 4 * 3600.0
    instance: str = ""
    receivers: tuple[ReceiverConfig, ...] = ()


@dataclass(frozen=True)
class RulesConfig:
    files: tuple[Path, ...] = ()


@dataclass(frozen=True)
class LogConfig:
    level: str = "info"
    format: str = "logfmt"
    ratelimit_interval_s: float = 300.0


@dataclass(frozen=True)
class DaemonConfig:
    web: WebConfig = field(default_factory=WebConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    alerting: AlertingConfig = field(default_factory=AlertingConfig)
    rules: RulesConfig = field(default_factory=RulesConfig)
    log: LogConfig = field(default_factory=LogConfig)
    simulate: str | None = None
    source: str = "<defaults>"
    # Play only these GPUs of the simulated scenario (one host of a multi-host pipeline).
    simulate_gpus: tuple[int, ...] = ()

    def summary(self) -> dict[str, Any]:
        """The effective settings, safe to print: receiver URLs and secrets left out."""
        return {
            "source": self.source,
            "web": {
                "listen_address": self.web.listen_address,
                "config_file": _p(self.web.config_file),
                "telemetry_path": self.web.telemetry_path,
            },
            "sampling": {"interval_s": self.sampling.interval_s,
                         "history_s": self.sampling.history_s},
            "analysis": {"interval_s": self.analysis.interval_s,
                         "window_s": self.analysis.window_s},
            "topology": {
                "rediscover_interval_s": self.topology.rediscover_interval_s,
                "static_file": _p(self.topology.static_file),
                "pipeline_id": self.topology.pipeline_id,
                "first_stage": self.topology.first_stage,
            },
            "alerting": {
                "state_dir": str(self.alerting.state_dir),
                "repeat_interval_s": self.alerting.repeat_interval_s,
                "instance": self.alerting.instance,
                "receivers": [
                    {"name": r.name, "type": r.type, "max_queue": r.max_queue,
                     "timeout_s": r.retry.timeout_s, "signed": bool(r.secret)}
                    for r in self.alerting.receivers
                ],
            },
            "rules": {"files": [str(f) for f in self.rules.files]},
            "log": {"level": self.log.level, "format": self.log.format,
                    "ratelimit_interval_s": self.log.ratelimit_interval_s},
            "simulate": self.simulate,
            "simulate_gpus": list(self.simulate_gpus),
        }  # fmt: skip


def _p(p: Path | None) -> str | None:
    return None if p is None else str(p)


@dataclass(frozen=True)
class Override:
    """A command-line flag that sets the config key `key` (dotted)."""

    flag: str
    key: str
    kind: Literal["str", "duration", "int", "path"]
    help: str


OVERRIDES: tuple[Override, ...] = (
    Override("--web.listen-address", "web.listen_address", "str",
             f"address to serve /metrics on (default {DEFAULT_LISTEN_ADDRESS})"),
    Override("--web.config.file", "web.config_file", "path",
             "exporter-toolkit web config (TLS, basic auth)"),
    Override("--web.telemetry-path", "web.telemetry_path", "str",
             "path of the metrics endpoint (default /metrics)"),
    Override("--sampling.interval", "sampling.interval", "duration",
             "time between GPU samples (default 1s)"),
    Override("--sampling.history", "sampling.history", "duration",
             "telemetry kept in memory per GPU (default 10m)"),
    Override("--analysis.interval", "analysis.interval", "duration",
             "time between diagnoses (default 10s)"),
    Override("--analysis.window", "analysis.window", "duration",
             "telemetry each diagnosis looks at (default 60s)"),
    Override("--topology.rediscover-interval", "topology.rediscover_interval", "duration",
             "time between engine/topology discoveries (default 60s)"),
    Override("--topology.file", "topology.static_file", "path",
             "static topology file instead of discovery"),
    Override("--topology.first-stage", "topology.first_stage", "int",
             "global stage index of this host's first stage (pipelines across hosts)"),
    Override("--alerting.state-dir", "alerting.state_dir", "path",
             "directory of the alert queues (default $STATE_DIRECTORY)"),
    Override("--alerting.repeat-interval", "alerting.repeat_interval", "duration",
             "re-send a firing alert this often (default 4h)"),
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


def load_config(
    path: Path | None,
    overrides: Mapping[str, str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> DaemonConfig:
    """Read, override and validate. Raises ConfigError naming file/line/key or the flag."""
    env = os.environ if env is None else env
    root = load_yaml(path) if path is not None else _empty_root()
    base_dir = path.parent if path is not None else Path.cwd()
    _apply_overrides(root, overrides or {})
    return _build(root, base_dir, env)


def _empty_root() -> Section:
    d = _LineDict()
    d.line, d.key_lines = 0, {}
    return Section(d, "<defaults>", "")


def _apply_overrides(root: Section, overrides: Mapping[str, str]) -> None:
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


def _build(root: Section, base_dir: Path, env: Mapping[str, str]) -> DaemonConfig:
    def path_of(sec: Section, key: str) -> Path | None:
        v = sec.opt_str(key)
        if not v:
            return None
        p = Path(v).expanduser()
        return p if p.is_absolute() else base_dir / p

    web_s = root.section("web")
    listen = web_s.str_("listen_address", DEFAULT_LISTEN_ADDRESS)
    try:
        parse_listen_address(listen)
    except ValueError as e:
        raise web_s.error("listen_address", str(e)) from None
    tpath = web_s.str_("telemetry_path", "/metrics")
    if not tpath.startswith("/") or tpath in ("/-/healthy", "/-/ready"):
        raise web_s.error("telemetry_path", f"must be a path starting with '/', got {tpath!r}")
    web = WebConfig(listen, path_of(web_s, "config_file"), tpath)
    web_s.finish()

    s = root.section("sampling")
    interval = s.duration_s("interval", 1.0)
    if interval < MIN_SAMPLING_INTERVAL_S:
        raise s.error(
            "interval",
            f"must be at least {MIN_SAMPLING_INTERVAL_S:g}s (GPM needs samples more than "
            f"100 ms apart), got {interval:g}s",
        )
    sampling = SamplingConfig(interval, s.duration_s("history", 600.0))
    s.finish()

    a = root.section("analysis")
    analysis = AnalysisConfig(a.duration_s("interval", 10.0), a.duration_s("window", 60.0))
    if analysis.window_s < 2 * sampling.interval_s:
        raise a.error(
            "window",
            f"must cover at least two samples (>= {2 * sampling.interval_s:g}s), "
            f"got {analysis.window_s:g}s",
        )
    if sampling.history_s < analysis.window_s:
        raise s.error(
            "history",
            f"must be at least analysis.window ({analysis.window_s:g}s), "
            f"got {sampling.history_s:g}s",
        )
    a.finish()

    t = root.section("topology")
    topology = TopologyConfig(
        t.duration_s("rediscover_interval", 60.0), path_of(t, "static_file"),
        t.str_("pipeline_id", ""), t.int_("first_stage", 0, minimum=0),
    )  # fmt: skip
    t.finish()

    alerting = _alerting(root.section("alerting"), env, path_of)

    r = root.section("rules")
    files_raw = r.raw("files") or []
    if not isinstance(files_raw, list) or not all(isinstance(f, str) for f in files_raw):
        raise r.error("files", "must be a list of file paths")
    rules = RulesConfig(tuple(p if p.is_absolute() else base_dir / p
                              for p in (Path(f).expanduser() for f in files_raw)))  # fmt: skip
    r.finish()

    lg = root.section("log")
    log = LogConfig(
        lg.choice("level", "info", LEVELS), lg.choice("format", "logfmt", FORMATS),
        lg.duration_s("ratelimit_interval", 300.0, positive=False),
    )  # fmt: skip
    lg.finish()

    simulate = root.opt_str("simulate") or None
    sim_gpus = root.raw("simulate_gpus") or []
    if not isinstance(sim_gpus, list) or not all(
        isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in sim_gpus
    ):
        raise root.error("simulate_gpus", "must be a list of GPU indices of the scenario")
    if len(set(sim_gpus)) != len(sim_gpus):
        raise root.error("simulate_gpus", f"lists a GPU twice: {sim_gpus}")
    root.finish()
    return DaemonConfig(web, sampling, analysis, topology, alerting, rules, log, simulate,
                        root.path, tuple(sim_gpus))  # fmt: skip


def _default_state_dir(env: Mapping[str, str]) -> Path:
    # systemd's StateDirectory= sets $STATE_DIRECTORY (colon-separated if several).
    sd = env.get("STATE_DIRECTORY", "").split(":")[0]
    if sd:
        return Path(sd)
    if env.get("BUBBLEWATCH_STATE_DIR"):
        return Path(env["BUBBLEWATCH_STATE_DIR"])
    xdg = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "bubblewatch"


def _alerting(s: Section, env: Mapping[str, str], path_of: Any) -> AlertingConfig:
    state_dir = path_of(s, "state_dir") or _default_state_dir(env)
    repeat = s.duration_s("repeat_interval", 4 * 3600.0)
    instance = s.str_("instance", "") or socket.gethostname()
    defaults = _retry(s, RetryPolicy())
    max_queue = s.int_("max_queue", 1000, minimum=1)
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
                r.int_("max_queue", max_queue, minimum=1), _retry(r, defaults),
            )  # fmt: skip
        except ValueError as e:
            key = "name" if "name" in str(e) else ("url" if "url" in r else "url_file")
            raise r.error(key, str(e)) from None
        r.finish()
        receivers.append(cfg)
    s.finish()
    return AlertingConfig(state_dir, repeat, instance, tuple(receivers))


def _retry(s: Section, base: RetryPolicy) -> RetryPolicy:
    try:
        return RetryPolicy(
            s.duration_s("timeout", base.timeout_s),
            s.duration_s("initial_backoff", base.initial_backoff_s),
            s.duration_s("max_backoff", base.max_backoff_s),
        )
    except ValueError as e:
        raise s.error("max_backoff", str(e)) from None


def _secret_value(s: Section, key: str, path_of: Any, *, required: bool) -> str | None:
    """`key` inline or `key_file` (contents, stripped): never both. Values are never echoed."""
    inline = s.opt_str(key)
    fpath: Path | None = path_of(s, f"{key}_file")
    if inline and fpath:
        raise s.error(f"{key}_file", f"give either '{key}' or '{key}_file', not both")
    if fpath:
        try:
            value = fpath.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise s.error(f"{key}_file", f"cannot read {fpath}: {e.strerror or e}") from None
        if not value:
            raise s.error(f"{key}_file", f"{fpath} is empty")
        return value
    if required and not inline:
        raise s.error(key, f"needs '{key}' or '{key}_file'")
    return inline


def parse_listen_address(addr: str) -> tuple[str, int]:
    """':9842' -> ('', 9842); '127.0.0.1:0'; '[::1]:9842' -> ('::1', 9842)."""
    host, sep, port_s = addr.rpartition(":")
    if not sep or not port_s.isdigit():
        raise ValueError(f"listen address must be HOST:PORT or :PORT, got {addr!r}")
    port = int(port_s)
    if port > 65535:
        raise ValueError(f"port must be 0..65535, got {port}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write IPv6 addresses in brackets, like [::1]:9842; got {addr!r}")
    return host, port


def parse_args_config(argv: Sequence[str]) -> DaemonConfig:
    """Convenience for tests and tools: parse flags, then load."""
    parser = argparse.ArgumentParser(prog="bubblewatch run")
    add_arguments(parser)
    args = parser.parse_args(list(argv))
    path = Path(args.config_file) if args.config_file else None
    return load_config(path, overrides_from_args(args))
