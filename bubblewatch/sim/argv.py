"""Keep a scenario's engine command line in step with overridden parallel settings."""

from __future__ import annotations

from bubblewatch.sim.spec import ParallelSpec
from bubblewatch.topology.flagtable import newest_table, table_for

# field -> (flags that set it, canonical flag); a bool field is a presence flag.
_SGLANG: dict[str, tuple[tuple[str, ...], str]] = {
    "pp_size": (("--pp-size", "--pipeline-parallel-size"), "--pp-size"),
    "tp_size": (("--tp-size", "--tensor-parallel-size", "--tp"), "--tp-size"),
    "dp_size": (("--dp-size", "--data-parallel-size", "--dp"), "--dp-size"),
    "pp_async_batch_depth": (("--pp-async-batch-depth",), "--pp-async-batch-depth"),
    "pp_max_micro_batch_size": (("--pp-max-micro-batch-size",), "--pp-max-micro-batch-size"),
    "max_running_requests": (("--max-running-requests",), "--max-running-requests"),
    "prefill_max_requests": (("--prefill-max-requests",), "--prefill-max-requests"),
    "cuda_graph": (("--disable-cuda-graph",), "--disable-cuda-graph"),
    "ep_size": (("--ep-size", "--expert-parallel-size", "--ep"), "--ep-size"),
}
_VLLM: dict[str, tuple[tuple[str, ...], str]] = {
    "pp_size": (("--pipeline-parallel-size", "-pp"), "--pipeline-parallel-size"),
    "tp_size": (("--tensor-parallel-size", "-tp"), "--tensor-parallel-size"),
    "dp_size": (("--data-parallel-size", "-dp"), "--data-parallel-size"),
    "max_running_requests": (("--max-num-seqs",), "--max-num-seqs"),
    "cuda_graph": (("--enforce-eager",), "--enforce-eager"),
}
_DEFAULTS = {"pp_size": 1, "tp_size": 1, "dp_size": 1, "pp_async_batch_depth": 0, "ep_size": 1}


_VLLM_ASYNC = ("--async-scheduling", "--no-async-scheduling")


def sync_argv(
    engine: str,
    argv: tuple[str, ...],
    parallel: ParallelSpec,
    changed: set[str],
    version: str | None = None,
) -> tuple[str, ...]:
    """`argv` with the flags of the `changed` parallel fields rewritten to match `parallel`.

    vLLM's `overlap_schedule` is `--async-scheduling` / `--no-async-scheduling`,
    written only where `version`'s flag table has them (0.10.2+; the newest table
    when the version is None): a flag the release lacks is never rendered.
    """
    table = _SGLANG if engine == "sglang" else _VLLM
    out = list(argv)
    if engine == "vllm" and "overlap_schedule" in changed:
        out = _drop(out, _VLLM_ASYNC, takes_value=False)
        release = table_for("vllm", version) or newest_table("vllm")
        if parallel.overlap_schedule is not None and release is not None:
            flag = _VLLM_ASYNC[0] if parallel.overlap_schedule else _VLLM_ASYNC[1]
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
