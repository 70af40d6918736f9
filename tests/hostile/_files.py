"""Hostile file contents, made quickly: nesting, alias bombs, huge numbers, gzip bombs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

TRACE_HEADER = (
    json.dumps({"bubblewatch_trace": 1, "gpus": [{"index": 0, "uuid": "GPU-0", "name": "x"}]})
    + "\n"
)


def yaml_nested(key: str, depth: int = 300) -> str:
    """`key: [[[...]]]`, `depth` levels deep (flow style, one line)."""
    return f"{key}: " + "[" * depth + "]" * depth + "\n"


def yaml_alias_bomb(key: str, levels: int = 9, fan: int = 10) -> str:
    """Billion laughs under `key`: `fan ** levels` strings from a few hundred bytes."""
    lines = [f"{key}:", '  - &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * fan)
        lines.append(f"  - &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def gzip_members(path: Path, prefix: bytes, block: bytes, total_bytes: int) -> Path:
    """A gzip file of `prefix` then `block` repeated to `total_bytes`, built in milliseconds.

    One member holds 16 MiB of `block`s; the file repeats that member (gzip
    readers concatenate members), so a 1 GiB bomb costs one 16 MiB compression.
    """
    member_raw = block * max(1, (16 << 20) // len(block))
    member = gzip.compress(member_raw, compresslevel=9)
    n = max(1, total_bytes // len(member_raw))
    with open(path, "wb") as f:
        f.write(gzip.compress(prefix))
        for _ in range(n):
            f.write(member)
    return path
