"""Ground truth for the real-engine run: times every `execute_model` in vLLM's workers.

Installed only in the real-engine venv (a `.pth` file there imports it at start-up);
it does nothing unless `BUBBLEWATCH_EXEC_LOG_DIR` names a directory. Then, once
`vllm.v1.worker.gpu_worker` is imported (the CPU worker inherits its
`execute_model`), each call (and each `sample_tokens`, the last rank's sampling, outside
`execute_model`) appends one line to `DIR/exec-PID.tsv`: kind (`exec` or
`sample`), rank, start and end (CLOCK_MONOTONIC, shared by every process on the host),
the calling thread's CPU seconds during the call (the forward pass's work: with
one OpenMP thread per worker the model runs on the calling thread, and a blocking
wait costs none), scheduled tokens and requests (0 for `sample`). The file is line-buffered, so a
killed worker leaves every complete line. The engine core writes `DIR/core.json`:
the batch queue it set up (`max_concurrent_batches`, the batches kept in flight),
async scheduling, `max_num_seqs` and the model runner. Beside them, what the engine
itself counts: `DIR/sched-PID.tsv` (the engine core's scheduler, each time it makes the
stats it sends to the API server) and `DIR/gauge-PID.tsv` (the API server, each time it
sets its Prometheus gauges from them), one line each: CLOCK_MONOTONIC, running,
waiting (as `vllm:num_requests_waiting` sums it). The gauges' file says what `/metrics`
served at any instant: the last value set before it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time

ENV = "BUBBLEWATCH_EXEC_LOG_DIR"


def _timed(inner, kind: str, out_dir: str):
    @functools.wraps(inner)
    def call(self, arg):
        t0, c0 = time.monotonic(), time.thread_time()
        try:
            return inner(self, arg)
        finally:
            t1, c1 = time.monotonic(), time.thread_time()
            log = getattr(self, "_bubblewatch_log", None)
            if log is None:
                path = os.path.join(out_dir, f"exec-{os.getpid()}.tsv")
                log = self._bubblewatch_log = open(path, "a", buffering=1)  # noqa: SIM115
            tokens = int(getattr(arg, "total_num_scheduled_tokens", 0) or 0)
            reqs = len(getattr(arg, "num_scheduled_tokens", None) or ())
            log.write(f"{kind}\t{self.rank}\t{t0:.6f}\t{t1:.6f}\t{c1 - c0:.6f}\t{tokens}\t{reqs}\n")

    return call


def _wrap(module) -> None:
    out_dir = os.environ[ENV]
    worker = module.Worker
    worker.execute_model = _timed(worker.execute_model, "exec", out_dir)
    worker.sample_tokens = _timed(worker.sample_tokens, "sample", out_dir)


def _wrap_core(module) -> None:
    """The engine core's batch queue (batches kept in flight), as it set it up."""
    out_dir = os.environ[ENV]
    core = module.EngineCore
    inner = core.__init__

    @functools.wraps(inner)
    def __init__(self, *args, **kwargs):
        inner(self, *args, **kwargs)
        cfg = getattr(self, "vllm_config", None)
        sched = getattr(cfg, "scheduler_config", None)
        facts = {
            "batch_queue_size": getattr(self, "batch_queue_size", None),
            "async_scheduling": getattr(sched, "async_scheduling", None),
            "max_num_seqs": getattr(sched, "max_num_seqs", None),
            "use_v2_model_runner": getattr(cfg, "use_v2_model_runner", None),
        }
        with open(os.path.join(out_dir, "core.json"), "w") as f:
            json.dump(facts, f)

    core.__init__ = __init__


def _waiting(stats) -> int:
    """Waiting as the API server's `vllm:num_requests_waiting` gauge sums it."""
    return int(stats.num_waiting_reqs) + int(getattr(stats, "num_skipped_waiting_reqs", 0) or 0)


def _stats_log(out_dir: str, name: str):
    path = os.path.join(out_dir, f"{name}-{os.getpid()}.tsv")
    return open(path, "a", buffering=1)


def _wrap_scheduler(module) -> None:
    """What the scheduler counts each time it makes the stats the API server's gauges show."""
    out_dir = os.environ[ENV]
    sched = module.Scheduler
    inner = sched.make_stats

    @functools.wraps(inner)
    def make_stats(self, *args, **kwargs):
        stats = inner(self, *args, **kwargs)
        if stats is not None:
            log = getattr(self, "_bubblewatch_stats_log", None)
            if log is None:
                log = self._bubblewatch_stats_log = _stats_log(out_dir, "sched")
            log.write(f"{time.monotonic():.6f}\t{stats.num_running_reqs}\t{_waiting(stats)}\n")
        return stats

    sched.make_stats = make_stats


def _wrap_prometheus(module) -> None:
    """What the API server sets its running and waiting gauges to, and when."""
    out_dir = os.environ[ENV]
    cls = module.PrometheusStatLogger
    inner = cls.record

    @functools.wraps(inner)
    def record(self, scheduler_stats, *args, **kwargs):
        if scheduler_stats is not None:
            log = getattr(self, "_bubblewatch_stats_log", None)
            if log is None:
                log = self._bubblewatch_stats_log = _stats_log(out_dir, "gauge")
            log.write(
                f"{time.monotonic():.6f}\t{scheduler_stats.num_running_reqs}\t"
                f"{_waiting(scheduler_stats)}\n"
            )
        return inner(self, scheduler_stats, *args, **kwargs)

    cls.record = record


# Module -> what to do once it is loaded.
TARGETS = {
    "vllm.v1.worker.gpu_worker": _wrap,
    "vllm.v1.engine.core": _wrap_core,
    "vllm.v1.core.sched.scheduler": _wrap_scheduler,
    "vllm.v1.metrics.loggers": _wrap_prometheus,
}


class _Loader(importlib.abc.Loader):
    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        TARGETS[module.__name__](module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


def install() -> None:
    if os.environ.get(ENV) and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
