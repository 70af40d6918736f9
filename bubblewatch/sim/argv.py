"""Keep a scenario's engine command line in step with overridden parallel settings."""

from __future__ import annotations

from bubblewatch import engines
from bubblewatch.engines.flagtable import newest_table, table_for
from bubblewatch.sim.spec import ParallelSpec

_DEFAULTS = {"pp_size": 1, "tp_size": 1, "dp_size": 1, "pp_async_batch_depth": 0, "ep_size": 1}


def sync_argv(
    engine: str,
    argv: tuple[str, ...],
    parallel: ParallelSpec,
    changed: set[str],
    version: str | None = None,
) -> tuple[str, ...]:
    """`argv` with the flags of the `changed` parallel fields rewritten to match `parallel`.

    The flags are the engine's (`Fixes.setting_flags` in bubblewatch.engines).
    `overlap_schedule` is the engine's async-scheduling pair (vLLM's
    `--async-scheduling` / `--no-async-scheduling`), written only where
    `version`'s flag table has them (0.10.2+; the newest table when the version
    is None): a flag the release lacks is never rendered.
    """
    fixes = engines.require(engine).fixes
    table = fixes.setting_flags
    out = list(argv)
    pair = fixes.async_flags
    if pair is not None and "overlap_schedule" in changed:
        out = _drop(out, pair, takes_value=False)
        release = table_for(engine, version) or newest_table(engine)
        if parallel.overlap_schedule is not None and release is not None:
            flag = pair[0] if parallel.overlap_schedule else pair[1]
            if release.accepts(flag):
                out.append(flag)
    for name in sorted(changed):
        if name not in table:
            continue
        flags, canonical = table[name]
        out = _drop(out, flags, takes_value=name != "cuda_graph")
        value = getattr(parallel, name)
        if name == "cuda_graph":
            if not value:
                out.append(canonical)
        elif value is not None and value != _DEFAULTS.get(name):
            out += [canonical, str(value)]
    return tuple(out)


def _drop(argv: list[str], flags: tuple[str, ...], *, takes_value: bool) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        head = arg.split("=", 1)[0]
        if head in flags:
            skip = takes_value and "=" not in arg
            continue
        out.append(arg)
    return out
