"""How many batches vLLM's engine core keeps in flight, per release.

`EngineCore.step_with_batch_queue` keeps at most `max_concurrent_batches`
batches queued. Read from the released wheels:

- 0.12.0 (`MultiprocExecutor.max_concurrent_batches`): 2 with async
  scheduling, else `pipeline_parallel_size`; async scheduling is off by
  default and `--async-scheduling` with PP > 1 is refused at start-up
  ("Async scheduling is not yet compatible with pipeline_parallel_size > 1").
- 0.19.1 (the executor): async scheduling is on by default
  (`SchedulerConfig.async_scheduling = None`), but with PP > 1 the executor
  still queues `pipeline_parallel_size` batches; 2 only with one stage.
- 0.23.0 and 0.28.0 (`VllmConfig.max_concurrent_batches`): `pp_size + 1`
  with async scheduling and the V2 model runner, else `pp_size` (2 with one
  stage); the V2 runner is the default only for a list of architectures
  (`DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`), so the command line alone does not
  say which runs unless `VLLM_USE_V2_MODEL_RUNNER` is set.
- 0.33.0: the same formula, the V2 runner is the default for every model it
  supports; with the V1 runner async scheduling is off with PP (refused when
  asked for).

A release between two of these is judged by the nearest one below; older
than 0.12.0, by 0.12.0.
"""

from __future__ import annotations

from bubblewatch.engines.base import InFlight
from bubblewatch.engines.versions import version_key

__all__ = ["batches_in_flight"]

# (first release, model): the releases read, oldest first.
_MODELS = (
    ("0.12.0", "executor_async_refused_with_pp"),
    ("0.19.1", "executor_async_default"),
    ("0.23.0", "config_v2_some_models"),
    ("0.33.0", "config_v2_default"),
)


def _model(version: str | None) -> tuple[str, str]:
    if version is None or version_key(version) is None:
        return _MODELS[-1]
    key = version_key(version)
    chosen = _MODELS[0]
    for first, model in _MODELS:
        first_key = version_key(first)
        if key is not None and first_key is not None and key >= first_key:
            chosen = (first, model)
    return chosen


def batches_in_flight(
    version: str | None,
    pp_size: int,
    *,
    async_flag: bool | None = None,
    v2_env: bool | None = None,
) -> InFlight:
    """vLLM `version`'s `max_concurrent_batches` for `pp_size` stages.

    `async_flag`: `--async-scheduling` (True), `--no-async-scheduling` (False) or
    neither (None); `v2_env`: `VLLM_USE_V2_MODEL_RUNNER` when set. A version of
    None is judged as the newest release read.
    """
    first, model = _model(version)
    pp = max(pp_size, 1)
    single = pp == 1
    if model == "executor_async_refused_with_pp":
        on = bool(async_flag)
        if on and not single:
            return InFlight(pp, False, False, True, f"{first}: async scheduling refused with PP")
        return InFlight(2 if on and single else pp, on, False, False, f"{first}: executor queue")
    if model == "executor_async_default":
        on = async_flag is not False
        return InFlight(2 if on and single else pp, on, False, False, f"{first}: executor queue")
    # 0.23-0.28 pick the V2 runner by architecture (unknown here); 0.33 by default.
    v2 = v2_env if v2_env is not None or model == "config_v2_some_models" else True
    if v2 is False and not single:
        # V1 runner: async scheduling is incompatible with PP (off by default, refused if asked).
        refused = async_flag is True
        why = f"{first}: V1 model runner, async scheduling off with PP"
        return InFlight(pp, False, False, refused, why)
    on = async_flag is not False
    if not on:
        return InFlight(pp, False, v2, False, f"{first}: --no-async-scheduling")
    if single:
        return InFlight(2, True, v2, False, f"{first}: async scheduling, one stage")
    if v2 is None:
        return InFlight(
            pp, True, None, False, f"{first}: pp_size + 1 only if the model runs on the V2 runner"
        )
    return InFlight(pp + 1, True, True, False, f"{first}: async scheduling + V2 runner")
