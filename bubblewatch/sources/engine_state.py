"""A serving engine's live settings, read back over HTTP, and whether a live update took.

What SGLang serves (its released wheels read, 0.5.3-0.5.23):

- `GET /server_info` (0.5.6+) and `/get_server_info` (0.4 onwards, still
  served, deprecated, in 0.5.23). The top level is the server arguments the
  tokenizer process started with: they never change. `internal_states` is a
  list, one entry per data-parallel scheduler, of that scheduler's own
  arguments (0.5.3.post1: `global_server_args_dict`; 0.5.14/0.5.15: the
  global `ServerArgs`; 0.5.23: the resolved arguments with the
  `/set_internal_state` overrides laid over them): the **live** values. The
  per-slot cap is `pp_max_micro_batch_size` (0.5.3.post1+) or
  `max_micro_batch_size` (0.4.6.post2-0.5.3), with the scheduler's default
  `max(max_running_requests // pp_size, 1)` filled in;
  `effective_max_running_requests_per_dp` (0.5.14+) is the limit the
  scheduler really applies; `pp_async_batch_depth` (0.5.7+) is fixed at start.
- `POST /set_internal_state` `{"server_args": {"pp_max_micro_batch_size": 8}}`
  answers a JSON list with one boolean per scheduler. The scheduler refuses a
  key it does not allow or a cap outside `[1, max_running_requests // pp_size]`;
  **up to 0.5.14 the answer is `true` all the same**, from 0.5.15 it is the
  scheduler's verdict. So before 0.5.15 only a read-back tells.
- With `--api-key`, both answer 401 without `Authorization: Bearer <key>`
  (`/set_internal_state` takes `--admin-api-key` instead when one is set, 0.5.14+).
- The answer holds every server argument, the API key among them up to
  0.5.15: only the settings in `LIVE_SETTINGS` are kept, the text is dropped.

vLLM (0.12) has no such endpoint: `/server_info` exists only with
`VLLM_SERVER_DEV_MODE=1` (it says not for production) and holds the start-up
configuration; nothing is settable live. TensorRT-LLM serves none either.

Reading never raises into the caller: `EngineStateReader.read()` returns a
`StateReading` with the state or the reason there is none.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from bubblewatch import engines
from bubblewatch.engines.sglang import ENGINE as SGLANG
from bubblewatch.errors import InputError
from bubblewatch.sources._http import AnswerError, classify, fetch
from bubblewatch.topology.redact import redact_text

__all__ = [
    "KEY_ENV",
    "KEY_FILE_ENV",
    "LIVE_SETTINGS",
    "REPLY_TRUSTED_FROM",
    "EngineStateReader",
    "LiveState",
    "StateParseError",
    "StateReading",
    "UpdateResult",
    "engine_api_key",
    "judge_update",
    "parse_server_info",
    "parse_update_reply",
    "recorded_state",
    "reply_trusted",
    "state_paths",
]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 1.0
DEFAULT_MAX_BYTES = 4 << 20
# The settings bubblewatch reads back, as the facts name them.
LIVE_SETTINGS = ("pp_max_micro_batch_size", "max_running_requests", "pp_async_batch_depth")
# The answers parsed here are SGLang's (its LiveApi in bubblewatch.engines.sglang):
# the per-slot cap's key, newest name first (max_micro_batch_size up to 0.5.3), and
# the release from which the /set_internal_state answer is the scheduler's verdict.
CAP_KEYS = SGLANG.live.cap_keys
REPLY_TRUSTED_FROM = SGLANG.live.reply_trusted_from


KEY_ENV = "BUBBLEWATCH_ENGINE_API_KEY"
KEY_FILE_ENV = "BUBBLEWATCH_ENGINE_API_KEY_FILE"


def engine_api_key(env: Mapping[str, str]) -> str | None:
    """The engine's API key from the environment, or None; InputError for an unreadable file."""
    if env.get(KEY_ENV):
        return env[KEY_ENV].strip() or None
    path = env.get(KEY_FILE_ENV)
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8").strip() or None
    except OSError as e:
        why = f"cannot read the engine API key: {e.strerror or e}"
        raise InputError(why, path=KEY_FILE_ENV) from None


class StateParseError(AnswerError):
    """The endpoint answered with something that holds no server arguments."""


@dataclass(frozen=True)
class LiveState:
    """The engine's settings as its scheduler holds them now, and as it started.

    `settings` are named as the facts name them (the cap under
    `pp_max_micro_batch_size` whatever the release calls it; `cap_key` is the
    release's own name). `disagree` lists settings on which data-parallel
    schedulers differ (the first scheduler's value is kept).
    """

    t_s: float
    path: str
    version: str | None
    settings: Mapping[str, int] = field(default_factory=dict)
    startup: Mapping[str, int] = field(default_factory=dict)
    cap_key: str | None = None
    schedulers: int = 0
    disagree: tuple[str, ...] = ()

    def get(self, name: str) -> int | None:
        return self.settings.get(name)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, t_s: float = 0.0) -> LiveState:
        """A state `to_dict` wrote (a trace header's `meta.engine_live`); StateParseError if not."""

        def ints(key: str) -> dict[str, int]:
            raw = d.get(key) or {}
            if not isinstance(raw, Mapping):
                raise StateParseError(f"engine_live.{key} must be a mapping")
            out = {k: v for k, v in ((str(k), _int(v)) for k, v in raw.items()) if v is not None}
            return {k: v for k, v in out.items() if k in LIVE_SETTINGS}

        if not isinstance(d.get("settings"), Mapping):
            raise StateParseError("engine_live has no settings")
        path, version, cap_key = d.get("path"), d.get("version"), d.get("cap_key")
        schedulers = _int(d.get("schedulers"))
        disagree = d.get("disagree") or []
        return cls(
            t_s,
            path if isinstance(path, str) else "",
            version if isinstance(version, str) else None,
            ints("settings"),
            ints("startup"),
            cap_key if isinstance(cap_key, str) else None,
            schedulers or 0,
            tuple(k for k in disagree if k in LIVE_SETTINGS) if isinstance(disagree, list) else (),
        )

    def to_dict(self) -> dict[str, Any]:
        """For JSON output: what was read, where, and from which release (no secrets held)."""
        return {
            "path": self.path,
            "version": self.version,
            "settings": dict(self.settings),
            "startup": dict(self.startup),
            "cap_key": self.cap_key,
            "schedulers": self.schedulers,
            "disagree": list(self.disagree),
        }


class StateReading(NamedTuple):
    state: LiveState | None
    reason: str | None


class UpdateResult(NamedTuple):
    """Whether a live update took: `taken`, `refused` or `unconfirmed`, and why."""

    status: str
    why: str


def _int(v: object) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
        return None
    return int(v) if v >= 0 else None


def _settings_of(d: Mapping[str, Any], *, live: bool) -> tuple[dict[str, int], str | None]:
    out: dict[str, int] = {}
    cap_key = None
    for key in CAP_KEYS:
        if (v := _int(d.get(key))) is not None:
            out["pp_max_micro_batch_size"], cap_key = v, key
            break
    running = _int(d.get("effective_max_running_requests_per_dp")) if live else None
    if running is None:
        running = _int(d.get("max_running_requests"))
    if running is not None:
        out["max_running_requests"] = running
    if (v := _int(d.get("pp_async_batch_depth"))) is not None:
        out["pp_async_batch_depth"] = v
    return out, cap_key


def parse_server_info(
    text: str, *, path: str = "/server_info", t_s: float = 0.0, version: str | None = None
) -> LiveState:
    """The live settings in a `/server_info` answer; raises StateParseError if there are none."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise StateParseError(f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise StateParseError(f"expected a JSON object, got {type(obj).__name__}")
    startup, cap_key = _settings_of(obj, live=False)
    states = obj.get("internal_states")
    if not isinstance(states, list):
        states = []
    per = [_settings_of(s, live=True) for s in states if isinstance(s, dict)]
    if not per and not startup:
        raise StateParseError("no server arguments (internal_states, pp_max_micro_batch_size, ...)")
    settings = dict(per[0][0]) if per else {}
    cap_key = next((k for _, k in per if k is not None), cap_key)
    # A setting no scheduler reports (depth, fixed at start) is the start-up value.
    for k, v in startup.items():
        settings.setdefault(k, v)
    disagree = tuple(k for k in LIVE_SETTINGS if len({s.get(k) for s, _ in per if k in s}) > 1)
    said = obj.get("version")
    return LiveState(
        t_s,
        path,
        said if isinstance(said, str) else version,
        settings,
        startup,
        cap_key,
        len(per),
        disagree,
    )


def state_paths(engine: str, version: str | None) -> tuple[str, ...]:
    """Where the engine serves its live arguments, in the order to ask; () where nowhere."""
    known = engines.get(engine)
    return () if known is None else known.live.paths_for(version)


def reply_trusted(version: str | None, engine: str = "sglang") -> bool:
    """Whether this release's `/set_internal_state` answer is the scheduler's verdict."""
    known = engines.get(engine)
    return known is not None and known.live.reply_trusted(version)


def parse_update_reply(text: str) -> tuple[bool, ...]:
    """The per-scheduler booleans of a `/set_internal_state` answer; StateParseError if not."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise StateParseError(f"not JSON: {e}") from None
    if isinstance(obj, dict) and isinstance(obj.get("updated"), bool):
        return (obj["updated"],)
    if isinstance(obj, list) and obj and all(isinstance(x, bool) for x in obj):
        return tuple(obj)
    raise StateParseError("expected a JSON list of booleans (one per scheduler)")


def judge_update(
    requested: Mapping[str, int],
    *,
    version: str | None,
    reply: Sequence[bool] | None = None,
    after: LiveState | None = None,
) -> UpdateResult:
    """Did the engine take `requested` (its own key names)? The reply from 0.5.15, else a read-back.

    A read-back wins over any reply (the value may have been changed again
    since); without one, `false` in a reply means refused on every release,
    and `true` means taken only from 0.5.15.
    """
    want = {"pp_max_micro_batch_size" if k in CAP_KEYS else k: v for k, v in requested.items()}
    asked = ", ".join(f"{k}={v}" for k, v in sorted(requested.items()))
    trusted = reply is not None and reply_trusted(version)
    if after is not None:
        got = {k: after.get(k) for k in want}
        if all(got[k] == v for k, v in want.items()):
            return UpdateResult("taken", f"read back {asked}")
        seen = ", ".join(f"{k}={got[k]}" for k in sorted(got))
        note = ""
        if reply is not None and all(reply) and not trusted:
            note = f"; its answer said updated, as every answer before {REPLY_TRUSTED_FROM} does"
        return UpdateResult("refused", f"asked {asked}, read back {seen}{note}")
    if reply is not None and not all(reply):  # no release answers false to an update it took
        return UpdateResult("refused", f"the engine answered not updated for {asked}")
    if trusted:
        return UpdateResult("taken", f"the engine answered updated for {asked}")
    why = "no read-back"
    if reply is not None:
        why += f"; the answer of {version or 'an unknown release'} says updated even when refused"
    return UpdateResult("unconfirmed", why)


def recorded_state(meta: Mapping[str, Any]) -> LiveState | None:
    """The engine's live settings a trace's header holds (`record` reads them), or None.

    A snapshot that is not one (an error said at record time, a damaged header) is None.
    """
    raw = meta.get("engine_live")
    if not isinstance(raw, Mapping) or "settings" not in raw:
        return None
    try:
        return LiveState.from_dict(raw)
    except StateParseError as e:
        log.warning("the trace's engine_live is ignored: %s", e)
        return None


class EngineStateReader:
    """Reads one engine's live settings with a short timeout; never raises, counts failures.

    `api_key` (from the environment, `engine_api_key`; never the engine's
    command line) goes only to `base_url`, as a bearer token, and is never
    logged: the reader follows no redirects.
    """

    def __init__(
        self,
        base_url: str,
        *,
        engine: str = "sglang",
        version: str | None = None,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.netloc or u.path not in ("", "/"):
            where = redact_text(base_url)
            raise ValueError(f"engine URL must be http(s)://host:port, got {where!r}")
        if u.username or u.password or u.query or u.fragment:
            raise ValueError("engine URL must carry no credentials, query or fragment")
        self.base_url = f"{u.scheme}://{u.netloc}"
        self.engine = engine
        self.version = version
        self.paths = state_paths(engine, version)
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._key = api_key or None
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: Counter[str] = Counter()
        self._last_reason: str | None = None

    @property
    def failures(self) -> dict[str, int]:
        with self._lock:
            return dict(self._failures)

    def read(self) -> StateReading:
        if not self.paths:
            return StateReading(None, f"{self.engine} serves no live settings")
        reason = "no answer"
        for path in self.paths:
            t_s = self._clock()
            try:
                text = self._get(path)
                state = parse_server_info(text, path=path, t_s=t_s, version=self.version)
            except Exception as e:  # never raise into the caller
                kind, reason = classify(e)
                if isinstance(e, urllib.error.HTTPError) and e.code == 404:
                    continue  # an older or newer release: try its other path
                self._record(kind, reason)
                return StateReading(None, reason)
            self._record(None, None)
            return StateReading(state, None)
        self._record("http", reason)
        return StateReading(None, reason)

    def _get(self, path: str) -> str:
        req = urllib.request.Request(self.base_url + path, headers={"Accept": "application/json"})
        if self._key is not None:
            req.add_unredirected_header("Authorization", f"Bearer {self._key}")
        return fetch(req, timeout_s=self.timeout_s, max_bytes=self.max_bytes)

    def _record(self, kind: str | None, reason: str | None) -> None:
        with self._lock:
            previous, self._last_reason = self._last_reason, reason
            if kind is not None:
                self._failures[kind] += 1
        if reason is not None and reason != previous:
            hint = " (set BUBBLEWATCH_ENGINE_API_KEY)" if "401" in reason else ""
            log.warning("engine settings at %s: %s%s", self.base_url, reason, hint)
        elif reason is None and previous is not None:
            log.info("engine settings at %s: reading again", self.base_url)
