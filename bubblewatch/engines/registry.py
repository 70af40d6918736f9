"""The engines bubblewatch knows, looked up by name.

The built-in engines are listed here; `register` adds one more (a plugin, a
test's toy engine) and `unregister` takes it away again. Nothing is read at
import time: each engine package is plain data.
"""

from __future__ import annotations

from collections.abc import Iterator

from bubblewatch.engines import sglang, trtllm, vllm
from bubblewatch.engines.base import Engine, RankOrder

__all__ = [
    "all_engines",
    "by_metric",
    "get",
    "names",
    "placement_of",
    "register",
    "require",
    "unregister",
]

BUILTIN: tuple[Engine, ...] = (sglang.ENGINE, vllm.ENGINE, trtllm.ENGINE)
_known: dict[str, Engine] = {e.name: e for e in BUILTIN}


def get(name: str | None) -> Engine | None:
    """The engine called `name`, or None for an engine bubblewatch does not know."""
    return None if name is None else _known.get(name)


def require(name: str) -> Engine:
    """The engine called `name`; KeyError naming the known ones otherwise."""
    engine = _known.get(name)
    if engine is None:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(names())}")
    return engine


def placement_of(name: str | None) -> RankOrder:
    """Where the engine puts its ranks; rank order for one bubblewatch does not know."""
    engine = get(name)
    return RankOrder() if engine is None else engine.placement


def names() -> tuple[str, ...]:
    """The known engines' names, built-ins first."""
    return tuple(_known)


def all_engines() -> Iterator[Engine]:
    return iter(tuple(_known.values()))


def by_metric(metric: str) -> Engine | None:
    """The engine whose running or queued gauge `metric` is."""
    for engine in _known.values():
        if metric in (engine.metrics.running, engine.metrics.queued):
            return engine
    return None


def register(engine: Engine) -> None:
    """Make `engine` known by its name; ValueError if the name is taken."""
    if engine.name in _known:
        raise ValueError(f"an engine called {engine.name!r} is already registered")
    _known[engine.name] = engine


def unregister(name: str) -> None:
    """Forget an engine `register` added; the built-ins stay."""
    if any(e.name == name for e in BUILTIN):
        raise ValueError(f"{name!r} is built in and cannot be unregistered")
    _known.pop(name, None)
