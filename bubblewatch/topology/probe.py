"""Ask a running engine its version over HTTP (SGLang `/server_info`, vLLM `/version`, ...).

SGLang serves `{"version": ...}` among its server arguments on `/server_info`
(0.5.6+) and `/get_server_info` (0.4 onwards; deprecated from 0.5.6); vLLM on
`/version`. A server started with `--api-key` answers 401 without it: the probe
never sends a key and gives None (the live read-back, sources/engine_state,
sends the operator's key and tells the version then). Never raises.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from bubblewatch import engines
from bubblewatch.engines.versions import normalise_version
from bubblewatch.topology.endpoint import base_url
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.redact import redact_text

__all__ = ["probe_version", "version_from_answer"]

log = logging.getLogger(__name__)

_MAX_BYTES = 4 << 20


def version_from_answer(text: str) -> str | None:
    """The `version` of a JSON answer, or None."""
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    if not isinstance(obj, dict):
        return None
    v = obj.get("version")
    return normalise_version(v) if isinstance(v, str) else None


def probe_version(config: EngineConfig, *, timeout_s: float = 1.0) -> str | None:
    """The engine's version from its own endpoint, or None when it does not say."""
    base = base_url(config)
    if base is None:
        return None
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    engine = engines.get(config.name)
    for path in () if engine is None else engine.live.version_paths:
        url = base + path
        try:
            with opener.open(urllib.request.Request(url), timeout=timeout_s) as resp:
                text = resp.read(_MAX_BYTES).decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError, ValueError) as e:
            log.debug("version probe %s: %s", redact_text(url), e)
            continue
        version = version_from_answer(text)
        if version is not None:
            return version
    return None
