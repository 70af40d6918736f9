"""Each serving engine's knowledge in one package, behind one interface.

`bubblewatch.engines.base.Engine` is the interface; `sglang/`, `vllm/` and
`trtllm/` each build one (command line and versions, generated flag tables,
metric names, live-state API, scheduler policy, fix spellings). The rest of
bubblewatch looks an engine up by name with `get` and asks it. This package
imports only bubblewatch's model and root helpers (floor 2). docs/engines.md
describes it and how to add an engine.
"""

from __future__ import annotations

from bubblewatch.engines.base import Engine
from bubblewatch.engines.registry import (
    all_engines,
    by_metric,
    get,
    names,
    placement_of,
    register,
    require,
    unregister,
)

__all__ = [
    "Engine",
    "all_engines",
    "by_metric",
    "get",
    "names",
    "placement_of",
    "register",
    "require",
    "unregister",
]
