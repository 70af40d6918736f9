"""The daemon's configuration: one YAML file, every option overridable by a flag.

The settings are frozen dataclasses; `load_config` reads, overrides and
validates them at start (and on reload), and an error names the file, line
and key, or the flag. The flags are declared in `flags.py`, the `alerting`
section is read in `alerting.py`. packaging/bubblewatch.yml is the
commented example, docs/daemon.md the reference.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bubblewatch.daemon.config.alerting import AlertingConfig, read_alerting
from bubblewatch.daemon.config.flags import (
    apply_overrides,
)
from bubblewatch.daemon.config.listen import (
    DEFAULT_LISTEN_ADDRESS,
    DEFAULT_MAX_REQUESTS,
    parse_listen_address,
)
from bubblewatch.daemon.config.record import RecordConfig, read_record
from bubblewatch.daemon.config.yamlsrc import Section, _LineDict, load_yaml, user_path
from bubblewatch.daemon.logging import FORMATS, LEVELS
from bubblewatch.limits import (
    ANALYSIS_MAX_INTERVAL_S,
    ANALYSIS_MAX_WINDOW_S,
    DAY_S,
    HISTORY_MAX_SAMPLES,
    KINETO_MAX_RANK,
    LIMITS_DOC,
    PEAK_MAX_HORIZON_S,
    SAMPLING_MAX_INTERVAL_S,
    WEB_MAX_REQUESTS,
)

# The names defined here; the command-line flags are in flags.py, the address in listen.py.
__all__ = [
    "MIN_SAMPLING_INTERVAL_S",
    "AnalysisConfig",
    "DaemonConfig",
    "LogConfig",
    "RulesConfig",
    "SamplingConfig",
    "TopologyConfig",
    "WebConfig",
    "load_config",
]

MIN_SAMPLING_INTERVAL_S = 0.1  # GPM samples must be > 100 ms apart (docs/nvml.md)


@dataclass(frozen=True)
class WebConfig:
    listen_address: str = DEFAULT_LISTEN_ADDRESS
    config_file: Path | None = None
    telemetry_path: str = "/metrics"
    # Requests answered at once; more get a fast 503 (node_exporter's --web.max-requests).
    max_requests: int = DEFAULT_MAX_REQUESTS


@dataclass(frozen=True)
class SamplingConfig:
    interval_s: float = 1.0
    history_s: float = 600.0
    # `sampling.interval` given (file or flag): it wins over the faster training default.
    interval_set: bool = False


@dataclass(frozen=True)
class AnalysisConfig:
    interval_s: float = 10.0
    window_s: float = 60.0
    # Load history the fill knobs are sized for (rules.load_peak): the busiest window in it.
    peak_horizon_s: float = DAY_S


@dataclass(frozen=True)
class TopologyConfig:
    rediscover_interval_s: float = 60.0
    static_file: Path | None = None
    pipeline_id: str = ""
    # Global stage index of this host's first stage, for pipelines that span hosts
    # (docs/fleet.md): the `stage` labels this daemon exports start here. None: from
    # discovery (a multi-node engine's --node-rank), else 0.
    first_stage: int | None = None


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
    record: RecordConfig = field(default_factory=RecordConfig)

    def summary(self) -> dict[str, Any]:
        """The effective settings, safe to print: receiver URLs and secrets left out."""
        return {
            "source": self.source,
            "web": {
                "listen_address": self.web.listen_address,
                "config_file": _p(self.web.config_file),
                "telemetry_path": self.web.telemetry_path,
                "max_requests": self.web.max_requests,
            },
            "sampling": {"interval_s": self.sampling.interval_s,
                         "history_s": self.sampling.history_s},
            "analysis": {"interval_s": self.analysis.interval_s,
                         "window_s": self.analysis.window_s,
                         "peak_horizon_s": self.analysis.peak_horizon_s},
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
            "record": {"path": _p(self.record.path),
                       "max_size_bytes": self.record.rotation.max_size_bytes,
                       "max_age_s": self.record.rotation.max_age_s,
                       "keep": self.record.rotation.keep},
            "simulate": self.simulate,
            "simulate_gpus": list(self.simulate_gpus),
        }  # fmt: skip


def _p(p: Path | None) -> str | None:
    return None if p is None else str(p)


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
    apply_overrides(root, overrides or {})
    return _build(root, base_dir, env)


def _empty_root() -> Section:
    d = _LineDict()
    d.line, d.key_lines = 0, {}
    return Section(d, "<defaults>", "")


def _build(root: Section, base_dir: Path, env: Mapping[str, str]) -> DaemonConfig:
    def path_of(sec: Section, key: str) -> Path | None:
        v = sec.opt_str(key)
        if not v:
            return None
        p = user_path(sec, key, v)
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
    web = WebConfig(
        listen, path_of(web_s, "config_file"), tpath,
        web_s.int_("max_requests", DEFAULT_MAX_REQUESTS, minimum=1, maximum=WEB_MAX_REQUESTS),
    )  # fmt: skip
    web_s.finish()

    s = root.section("sampling")
    interval = s.duration_s("interval", 1.0, maximum_s=SAMPLING_MAX_INTERVAL_S)
    if interval < MIN_SAMPLING_INTERVAL_S:
        raise s.error(
            "interval",
            f"must be at least {MIN_SAMPLING_INTERVAL_S:g}s (GPM needs samples more than "
            f"100 ms apart), got {interval:g}s",
        )
    sampling = SamplingConfig(
        interval,
        s.duration_s("history", 600.0, maximum_s=math.inf),  # bounded in samples just below
        interval_set=s.raw("interval") is not None,
    )
    if sampling.history_s / interval > HISTORY_MAX_SAMPLES:
        raise s.error(
            "history",
            f"keeps more than {HISTORY_MAX_SAMPLES} samples per GPU at a {interval:g}s interval "
            f"(at most {HISTORY_MAX_SAMPLES * interval:g}s; see {LIMITS_DOC}), "
            f"got {sampling.history_s:g}s",
        )
    s.finish()

    a = root.section("analysis")
    analysis = AnalysisConfig(
        a.duration_s("interval", 10.0, maximum_s=ANALYSIS_MAX_INTERVAL_S),
        a.duration_s("window", 60.0),
        a.duration_s("peak_horizon", DAY_S, maximum_s=PEAK_MAX_HORIZON_S),
    )
    if analysis.peak_horizon_s < analysis.window_s:
        raise a.error(
            "peak_horizon",
            f"must cover at least one analysis.window ({analysis.window_s:g}s), "
            f"got {analysis.peak_horizon_s:g}s",
        )
    if analysis.window_s > ANALYSIS_MAX_WINDOW_S:
        raise a.error(
            "window",
            f"must be at most {ANALYSIS_MAX_WINDOW_S:g}s (see {LIMITS_DOC}), "
            f"got {analysis.window_s:g}s",
        )
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
        t.duration_s("rediscover_interval", 60.0, maximum_s=DAY_S), path_of(t, "static_file"),
        t.str_("pipeline_id", ""),
        None if t.raw("first_stage") is None
        else t.int_("first_stage", 0, minimum=0, maximum=KINETO_MAX_RANK),
    )  # fmt: skip
    t.finish()

    alerting = read_alerting(root.section("alerting"), env, path_of)

    r = root.section("rules")
    files_raw = r.raw("files") or []
    if not isinstance(files_raw, list) or not all(isinstance(f, str) for f in files_raw):
        raise r.error("files", "must be a list of file paths")
    rules = RulesConfig(tuple(p if p.is_absolute() else base_dir / p
                              for p in (user_path(r, "files", f) for f in files_raw)))  # fmt: skip
    r.finish()

    lg = root.section("log")
    log = LogConfig(
        lg.choice("level", "info", LEVELS), lg.choice("format", "logfmt", FORMATS),
        lg.duration_s("ratelimit_interval", 300.0, positive=False, maximum_s=DAY_S),
    )  # fmt: skip
    lg.finish()

    record = read_record(root.section("record"), path_of)

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
                        root.path, tuple(sim_gpus), record=record)  # fmt: skip
