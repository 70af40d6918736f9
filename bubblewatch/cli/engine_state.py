"""`bubblewatch engine-state`: a running engine's live settings, and whether a live update took.

After `curl -X POST .../set_internal_state -d '{"server_args": {...}}'`, give
the same values as `--expect` (and the answer as `--reply`): from SGLang 0.5.15
the answer is the scheduler's verdict; up to 0.5.14 it says `[true]` even when
refused, so the read-back decides. Exit status 0 when it took (or nothing was
asked), 1 when it was refused or cannot be confirmed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from bubblewatch import engines
from bubblewatch.engines.versions import normalise_version
from bubblewatch.errors import InputError
from bubblewatch.sources.engine_state import (
    EngineStateReader,
    StateParseError,
    engine_api_key,
    judge_update,
    parse_update_reply,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("url", help="the engine's HTTP server, e.g. http://127.0.0.1:30000")
    p.add_argument("--engine", default="sglang", choices=engines.names())
    p.add_argument("--engine-version", metavar="V", help="the engine's release, if not its own")
    p.add_argument(
        "--expect",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a value set live (POST /set_internal_state), e.g. pp_max_micro_batch_size=8",
    )
    p.add_argument(
        "--reply", metavar="JSON", help="what /set_internal_state answered, e.g. '[true]'"
    )
    p.add_argument("--timeout", type=float, default=2.0, metavar="SECONDS")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=run)


def _expected(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            if not sep or not key:
                raise ValueError
            out[key.strip()] = int(value)
        except ValueError:
            raise InputError(f"expected KEY=INTEGER, got {item!r}", path="--expect") from None
    return out


def run(args: argparse.Namespace) -> int:
    expect = _expected(args.expect)
    reply = None
    if args.reply is not None:
        try:
            reply = parse_update_reply(args.reply)
        except StateParseError as e:
            raise InputError(str(e), path="--reply") from None
    version = normalise_version(args.engine_version) if args.engine_version else None
    if args.engine_version and version is None:
        raise InputError(f"not a release version: {args.engine_version!r}", path="--engine-version")
    if not args.timeout > 0:
        raise InputError(f"must be > 0 seconds, got {args.timeout:g}", path="--timeout")
    try:
        reader = EngineStateReader(
            args.url,
            engine=args.engine,
            version=version,
            api_key=engine_api_key(os.environ),
            timeout_s=args.timeout,
        )
    except ValueError as e:
        raise InputError(str(e), path="url") from None
    reading = reader.read()
    state = reading.state
    out: dict[str, Any] = {
        "url": reader.base_url,
        "state": None if state is None else state.to_dict(),
        "error": reading.reason,
    }
    rc = 0
    if expect:
        said = version or (None if state is None else state.version)
        result = judge_update(expect, version=said, reply=reply, after=state)
        out["update"] = {"status": result.status, "why": result.why, "version": said}
        rc = 0 if result.status == "taken" else 1
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return rc
    if state is None:
        print(f"{reader.base_url}: settings not read back ({reading.reason})")
    else:
        named = ", ".join(f"{k}={v}" for k, v in sorted(state.settings.items()))
        print(f"{reader.base_url} ({state.version or 'release unknown'}, {state.path}): {named}")
    if "update" in out:
        print(f"update {out['update']['status']}: {out['update']['why']}")
    return rc
