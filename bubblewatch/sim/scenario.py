"""Loading scenarios: built-in names or YAML files, strict validation, dotted overrides.

Every error names the file, the line and the dotted field, and says what was
expected. Unknown keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
import types
from dataclasses import MISSING, fields, is_dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from bubblewatch import engines
from bubblewatch.engines.versions import version_key
from bubblewatch.limits import (
    SIM_MAX_CONCURRENCY,
    SIM_MAX_GPUS,
    SIM_MAX_TOKEN_LAYER_S,
)
from bubblewatch.safeyaml import load_yaml_file
from bubblewatch.sim.argv import sync_argv
from bubblewatch.sim.costs import CostModel
from bubblewatch.sim.errors import ScenarioError
from bubblewatch.sim.spec import (
    ENGINES,
    FAULT_KINDS,
    INTERCONNECTS,
    Scenario,
)
from bubblewatch.sim.training_checks import training_cross_checks
from bubblewatch.sim.training_spec import SCHEDULES, TrainingScenario

# Numbers that must be > 0 (others may be 0); names ending in _ratio must lie in [0, 1].
_POSITIVE = {
    "memory_bandwidth_bytes_per_s",
    "tensor_flops_per_s",
    "memory_efficiency_ratio",
    "compute_efficiency_ratio",
    "power_limit_w",
    "idle_power_w",
    "spin_power_w",
    "peak_power_w",
    "max_sm_clock_mhz",
    "idle_sm_clock_mhz",
    "utilization_period_s",
    "instant_power_window_s",
    "thermal_tau_s",
    "bandwidth_bytes_per_s",
    "layers",
    "hidden_size",
    "kernels_per_layer",
    "activation_bytes",
    "experts",
    "experts_per_token",
    "pp_size",
    "tp_size",
    "dp_size",
    "max_running_requests",
    "pp_max_micro_batch_size",
    "prefill_max_requests",
    "input_tokens",
    "output_tokens",
    "chunk_size",
    "clock_ratio",
    "micro_batches",
    "virtual_stages",
    "backward_factor",
}
_NONEMPTY_STR = {"name", "kind"}
_CHOICES = {
    "engine": ENGINES,
    "hardware.interconnect.kind": INTERCONNECTS,
    "job.schedule": SCHEDULES,
}
_INFINITE_OK = {"end_s"}
_SKIP = {"source", "raw"}


class _Ctx:
    """Where values came from, to make errors precise."""

    def __init__(self, path: str, lines: dict[str, int]) -> None:
        self.path = path
        self.lines = lines

    def line(self, where: str) -> int | None:
        while where:
            if where in self.lines:
                return self.lines[where]
            parent = re.sub(r"(\.[^.\[\]]+|\[\d+\])$", "", where)
            where = "" if parent == where else parent
        return self.lines.get("")

    def fail(self, where: str, message: str) -> ScenarioError:
        return ScenarioError(message, path=self.path, line=self.line(where), field=where or None)


def builtin_dir() -> Path:
    return Path(str(resources.files("bubblewatch").joinpath("scenarios")))


def list_scenarios() -> list[tuple[str, str]]:
    """(name, one-line description) of every built-in scenario, sorted by name."""
    out: list[tuple[str, str]] = []
    for p in sorted(builtin_dir().glob("*.yaml")):
        sc = load_scenario(p)
        out.append((sc.name, sc.description.strip().splitlines()[0] if sc.description else ""))
    return sorted(out)


AnyScenario = Scenario | TrainingScenario


def load_scenario(name_or_path: str | Path) -> AnyScenario:
    """A built-in scenario by name (`pp8-serialized`) or a YAML file by path."""
    text_path = Path(name_or_path)
    looks_like_path = (
        isinstance(name_or_path, Path)
        or any(c in str(name_or_path) for c in ("/", "\\"))
        or str(name_or_path).endswith((".yaml", ".yml"))
    )
    if not looks_like_path:
        candidate = builtin_dir() / f"{name_or_path}.yaml"
        if not candidate.is_file():
            known = ", ".join(n.stem for n in sorted(builtin_dir().glob("*.yaml")))
            raise ScenarioError(
                f"no built-in scenario called {str(name_or_path)!r} (known: {known}); "
                "pass a path to use a YAML file",
                path=str(name_or_path),
            )
        text_path = candidate
    root = load_yaml_file(text_path, ScenarioError)
    if root is None:
        raise ScenarioError(
            "empty file: expected a mapping of scenario fields", path=str(text_path)
        )
    ctx = _Ctx(str(text_path), root.lines_by_path())
    return build_scenario(root.plain(), ctx, source=str(text_path))


def build_scenario(raw: Any, ctx: _Ctx, *, source: str) -> AnyScenario:
    """A serving scenario, or a training job when the mapping has a `job` section."""
    if not isinstance(raw, dict):
        raise ctx.fail("", "a scenario must be a mapping of fields (name, description, ...)")
    if "job" in raw:
        job = _build(TrainingScenario, raw, "", ctx)
        assert isinstance(job, TrainingScenario)
        training_cross_checks(job, ctx.fail)
        return _replace_meta(job, source=source, raw=raw)
    sc = _build(Scenario, raw, "", ctx)
    assert isinstance(sc, Scenario)
    _cross_checks(sc, ctx)
    return _replace_meta(sc, source=source, raw=raw)


def _replace_meta(sc: AnyScenario, *, source: str, raw: dict[str, Any]) -> AnyScenario:
    from dataclasses import replace

    return replace(sc, source=source, raw=copy.deepcopy(raw))


S = TypeVar("S", bound=AnyScenario)


def apply_overrides(sc: S, overrides: dict[str, Any]) -> S:
    """A copy of `sc` with dotted fields replaced (`{"workload.concurrency": 1}`), validated again.

    The overrides edit `sc`'s source mapping; a serving scenario stays one, and
    so does a training job.
    """
    raw = copy.deepcopy(sc.raw)
    where = f"{sc.source or sc.name} (with overrides)"
    for key, value in overrides.items():
        _set_dotted(raw, key, value, where)
    new = build_scenario(raw, _Ctx(where, {}), source=sc.source)
    if not isinstance(new, type(sc)):
        raise ScenarioError(
            "overrides cannot turn a serving scenario into a training job or back", path=where
        )
    changed = {k.split(".", 1)[1] for k in overrides if k.startswith("parallel.")}
    if changed and isinstance(new, Scenario):
        from dataclasses import replace

        argv = sync_argv(new.engine, new.engine_argv, new.parallel, changed, new.engine_version)
        new = replace(new, engine_argv=argv)
        new.raw["engine_argv"] = list(argv)
    return new


_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _set_dotted(raw: dict[str, Any], key: str, value: Any, where: str) -> None:
    parts: list[str | int] = []
    pos = 0
    for m in _TOKEN.finditer(key):
        if m.start() not in (pos, pos + 1):
            break
        parts.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        pos = m.end()
    if not parts or pos != len(key):
        raise ScenarioError(
            "override keys look like 'section.field' or 'faults[0].field'", path=where, field=key
        )
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                raise ScenarioError("no such list item to override", path=where, field=key)
            node = node[part]
            continue
        if not isinstance(node, dict):
            raise ScenarioError("cannot override inside a non-mapping", path=where, field=key)
        if part not in node or node[part] is None:
            node[part] = [] if isinstance(nxt, int) else {}
        node = node[part]
    last = parts[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise ScenarioError("no such list item to override", path=where, field=key)
        node[last] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ScenarioError("cannot override inside a non-mapping", path=where, field=key)


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _build(cls: type[Any], raw: Any, where: str, ctx: _Ctx) -> Any:
    flds = {f.name: f for f in fields(cls) if f.name not in _SKIP}
    if not isinstance(raw, dict):
        raise ctx.fail(where, f"must be a mapping with fields {', '.join(flds)}")
    for key in raw:
        if key not in flds:
            raise ctx.fail(_join(where, key), f"unknown key (expected one of: {', '.join(flds)})")
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for name, f in flds.items():
        key = _join(where, name)
        if name not in raw:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ctx.fail(key, "required field is missing")
            continue
        kwargs[name] = _value(hints[name], raw[name], key, name, ctx)
    return cls(**kwargs)


def _value(tp: Any, v: Any, key: str, name: str, ctx: _Ctx) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if v is None:
            return None
        return _value(args[0], v, key, name, ctx)
    if origin is tuple:
        item_tp = get_args(tp)[0]
        if not isinstance(v, list):
            raise ctx.fail(key, f"must be a list, got {v!r}")
        return tuple(_value(item_tp, x, f"{key}[{i}]", name, ctx) for i, x in enumerate(v))
    if is_dataclass(tp):
        return _build(tp, v, key, ctx)  # type: ignore[arg-type]
    if tp is bool:
        if not isinstance(v, bool):
            raise ctx.fail(key, f"must be true or false, got {v!r}")
        return v
    if tp is str:
        if not isinstance(v, str) or (name in _NONEMPTY_STR and not v.strip()):
            raise ctx.fail(key, f"must be a non-empty string, got {v!r}")
        choices = _CHOICES.get(key) or _CHOICES.get(name)
        if choices and v not in choices:
            raise ctx.fail(key, f"must be one of {', '.join(choices)}, got {v!r}")
        return v
    if tp is int:
        if not isinstance(v, int) or isinstance(v, bool):
            raise ctx.fail(key, f"must be an integer, got {v!r}")
        lo = 1 if name in _POSITIVE else 0
        if v < lo:
            raise ctx.fail(key, f"must be an integer >= {lo}, got {v!r}")
        return v
    if tp is float:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ctx.fail(key, f"must be a number, got {v!r}")
        x = float(v)
        if math.isnan(x) or (math.isinf(x) and not (name in _INFINITE_OK and x > 0)):
            raise ctx.fail(key, f"must be a finite number, got {v!r}")
        if name in _POSITIVE and x <= 0:
            raise ctx.fail(key, f"must be > 0, got {v!r}")
        if x < 0:
            raise ctx.fail(key, f"must be >= 0, got {v!r}")
        if name.endswith("_ratio") and x > 1:
            raise ctx.fail(key, f"must be a ratio between 0 and 1, got {v!r}")
        return x
    raise TypeError(f"unsupported field type {tp!r} for {key}")  # pragma: no cover


def _check_costs(sc: Scenario, ctx: _Ctx) -> None:
    """One token must cross one layer in usable time: `tensor_flops_per_s: 1e-308` gave inf.

    Bounded here, the simulator's arithmetic (times x tokens x layers) stays finite.
    """
    costs = CostModel(sc)
    layer = costs.layer(prefill=False, tokens=1, context_tokens=sc.workload.input_tokens)
    token_s = layer.gpu_s + layer.comm_s + layer.launch_s + costs.send_s(1)
    if not token_s <= SIM_MAX_TOKEN_LAYER_S:  # NaN and inf fail too
        raise ctx.fail(
            "hardware",
            f"one token through one layer would take {token_s:g} s at these rates and sizes; "
            f"at most {SIM_MAX_TOKEN_LAYER_S:g} s (check the *_per_s rates)",
        )


def _cross_checks(sc: Scenario, ctx: _Ctx) -> None:
    if sc.parallel.n_gpus > SIM_MAX_GPUS:  # bounds: docs/daemon.md, Limits
        raise ctx.fail("parallel", f"uses {sc.parallel.n_gpus} GPUs; at most {SIM_MAX_GPUS}")
    for i, phase in enumerate(sc.workload.phases()):
        if phase.concurrency > SIM_MAX_CONCURRENCY:
            key = "workload.concurrency" if i == 0 else f"workload.schedule[{i - 1}].concurrency"
            raise ctx.fail(key, f"must be at most {SIM_MAX_CONCURRENCY}, got {phase.concurrency}")
    gpu = sc.hardware.gpu
    if not gpu.idle_power_w <= gpu.spin_power_w <= gpu.peak_power_w:
        raise ctx.fail(
            "hardware.gpu.spin_power_w",
            f"expected idle_power_w <= spin_power_w <= peak_power_w, got {gpu.idle_power_w:g}, "
            f"{gpu.spin_power_w:g}, {gpu.peak_power_w:g}",
        )
    if gpu.power_limit_w <= gpu.idle_power_w:
        raise ctx.fail("hardware.gpu.power_limit_w", "must be above idle_power_w")
    if gpu.idle_sm_clock_mhz > gpu.max_sm_clock_mhz:
        raise ctx.fail("hardware.gpu.idle_sm_clock_mhz", "must not exceed max_sm_clock_mhz")
    moe = sc.model.moe
    if moe is not None and moe.experts_per_token > moe.experts:
        raise ctx.fail("model.moe.experts_per_token", "must not exceed model.moe.experts")
    par = sc.parallel
    if par.layer_partition is not None:
        if len(par.layer_partition) != par.pp_size:
            raise ctx.fail(
                "parallel.layer_partition",
                f"needs pp_size={par.pp_size} entries, got {len(par.layer_partition)}",
            )
        if sum(par.layer_partition) != sc.model.layers:
            raise ctx.fail(
                "parallel.layer_partition",
                f"entries must sum to model.layers={sc.model.layers}, "
                f"got {sum(par.layer_partition)}",
            )
    elif sc.model.layers < par.pp_size:
        raise ctx.fail("parallel.pp_size", f"exceeds model.layers={sc.model.layers}")
    if par.ep_size > 1 and (moe is None or par.tp_size % par.ep_size):
        raise ctx.fail("parallel.ep_size", "needs a model.moe and must divide parallel.tp_size")
    _check_costs(sc, ctx)
    if par.pp_async_batch_depth and not engines.require(sc.engine).scheduler.async_depth:
        raise ctx.fail(
            "parallel.pp_async_batch_depth", f"is an SGLang setting; use 0 for {sc.engine}"
        )
    if sc.engine_version is not None and version_key(sc.engine_version) is None:
        raise ctx.fail(
            "engine_version", f"must be a release such as 0.33.0, got {sc.engine_version!r}"
        )
    flight = par.in_flight(sc.engine, sc.engine_version, sc.engine_argv)
    if flight is not None and flight.refused:
        raise ctx.fail("engine_argv", f"{sc.engine} would refuse to start: {flight.why}")
    if not sc.engine_argv:
        raise ctx.fail("engine_argv", "must list the engine command line, e.g. [vllm, serve, ...]")
    for i, arg in enumerate(sc.engine_argv):
        if arg.split("=", 1)[0] in ("--api-key", "--hf-token", "--token"):
            raise ctx.fail(f"engine_argv[{i}]", "scenarios must not carry secrets (API keys)")
    starts = [p.start_s for p in sc.workload.schedule]
    if any(b <= a for a, b in itertools.pairwise(starts)):
        raise ctx.fail("workload.schedule", "phases must have strictly increasing start_s")
    for i, f in enumerate(sc.faults):
        key = f"faults[{i}]"
        if f.kind not in FAULT_KINDS:
            raise ctx.fail(
                f"{key}.kind", f"must be one of {', '.join(FAULT_KINDS)}, got {f.kind!r}"
            )
        if f.gpu >= par.n_gpus:
            raise ctx.fail(f"{key}.gpu", f"must be a GPU index below {par.n_gpus}, got {f.gpu}")
        if f.end_s <= f.start_s:
            raise ctx.fail(f"{key}.end_s", "must be after start_s")
        if f.clock_ratio > 1:
            raise ctx.fail(f"{key}.clock_ratio", f"must be in (0, 1], got {f.clock_ratio:g}")
        if f.power_limit_w is not None and f.power_limit_w <= gpu.idle_power_w:
            raise ctx.fail(f"{key}.power_limit_w", "must be above hardware.gpu.idle_power_w")
