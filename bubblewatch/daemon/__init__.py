"""The daemon's plumbing: config, logging, sd_notify, web config and the HTTP endpoint.

`bubblewatch run` joins these with the sampler, detector, rules and sinks.
"""

from bubblewatch.daemon.config.file import DaemonConfig, load_config
from bubblewatch.daemon.config.flags import OVERRIDES, add_arguments, overrides_from_args
from bubblewatch.daemon.config.listen import parse_listen_address
from bubblewatch.daemon.config.web import BasicAuth, WebSettings, load_web_config
from bubblewatch.daemon.config.yamlsrc import ConfigError
from bubblewatch.daemon.http.server import MetricsServer
from bubblewatch.daemon.logging import RateLimitFilter, configure_logging
from bubblewatch.daemon.sdnotify import SdNotifier

__all__ = [
    "OVERRIDES",
    "BasicAuth",
    "ConfigError",
    "DaemonConfig",
    "MetricsServer",
    "RateLimitFilter",
    "SdNotifier",
    "WebSettings",
    "add_arguments",
    "configure_logging",
    "load_config",
    "load_web_config",
    "overrides_from_args",
    "parse_listen_address",
]
