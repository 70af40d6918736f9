"""The checks of the real-engine run (run.py) that read the engine: discovery, live state, loads.

Each check prints `ok` or `FAIL` with what it compared, or `open` where the run could
not decide (`Checks`); `bw` runs
this checkout's `bubblewatch` as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import standin
from client import LoadResult
from engine_proc import VLLM_VERSION, Engine

REPO = Path(__file__).resolve().parents[2]
# How far the engine's running + waiting lie outside the client's in-flight counts during
# the read, on average over the reads, as a share of C (at least half a request): a
# request between its end in the engine and its next one from the client is counted by
# one side only, a few tens of ms per request.
COUNT_TOLERANCE = 0.05


@dataclass
class Checks:
    failed: list[str] = field(default_factory=list)
    passed: int = 0
    # Checks the run could not decide (a fix's throughput whose interval holds the bound):
    # printed and reported with what they measured, not failed.
    open: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> bool:
        print(("  ok   " if ok else "  FAIL ") + what, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
        return ok

    def verdict(self, verdict: str, what: str) -> None:
        """A judged throughput (judge.py): safe passes, costs fails, unresolved is open."""
        if verdict == "unresolved":
            self.unresolved(what)
        else:
            self.check(verdict == "safe", what)

    def unresolved(self, what: str) -> None:
        print("  open " + what, flush=True)
        self.open.append(what)


def bw(*args: str, env: dict[str, str] | None = None, timeout_s: float = 120.0) -> Any:
    full = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "bubblewatch", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def fake_nvml_env(out: Path, procs: str) -> dict[str, str]:
    """The fake NVML (tests/fake_nvml) reporting `procs` ("gpu:pid,...") as GPU processes."""
    sys.path.insert(0, str(REPO / "tests"))
    from fake_nvml.build import build
    from fake_nvml.timeline import ramp

    lib = build(out / "fake_nvml")
    timeline = ramp(2).write(out / "fake_nvml" / "idle.bwtl")
    return {
        "LD_LIBRARY_PATH": str(lib.parent),
        "BUBBLEWATCH_FAKE_NVML_TIMELINE": str(timeline),
        "BUBBLEWATCH_FAKE_NVML_PROCS": procs,
    }


def check_discovery(checks: Checks, engine: Engine, ranks: dict[int, int], out: Path) -> None:
    assert engine.proc is not None
    for gpus, name in (((0, 1), "each rank on its GPU"), ((1, 0), "the pids swapped")):
        procs = ",".join(f"{g}:{ranks[r]}" for r, g in zip((0, 1), gpus, strict=True))
        proc = bw("topology", "--json", env=fake_nvml_env(out, procs))
        if not checks.check(proc.returncode == 0, f"topology ({name}) exits 0"):
            print(proc.stderr[-2000:])
            continue
        found = json.loads(proc.stdout)
        pipes = found["pipelines"]
        ok = len(pipes) == 1
        checks.check(ok, f"topology ({name}): one pipeline found ({len(pipes)})")
        if not ok:
            continue
        p = pipes[0]
        want = [[gpus[0]], [gpus[1]]]  # stage s holds the GPU that rank s's pid is on
        checks.check(
            p["engine"]["name"] == "vllm" and p["topology"]["pp_size"] == 2,
            f"topology ({name}): vllm PP {p['topology']['pp_size']}",
        )
        checks.check(
            p["topology"]["stages"] == want,
            f"topology ({name}): stages {p['topology']['stages']} == {want}",
        )
        checks.check(
            p["launcher_pid"] == engine.proc.pid,
            f"topology ({name}): launcher pid {p['launcher_pid']} is the API server "
            f"{engine.proc.pid}",
        )
        checks.check(
            p["engine"]["version"] == VLLM_VERSION,
            f"topology ({name}): version {p['engine']['version']}",
        )
        checks.check(
            p["metrics_url"] == engine.url + "/metrics",
            f"topology ({name}): metrics URL {p['metrics_url']}",
        )


def check_live_state(checks: Checks, engine: Engine) -> None:
    proc = bw("engine-state", engine.url, "--engine", "vllm", "--json")
    body = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    checks.check(
        proc.returncode == 0
        and body.get("state") is None
        and "no live settings" in str(body.get("error")),
        f"engine-state --engine vllm: no live state ({proc.returncode}, "
        f"{body.get('error') or proc.stderr.strip()[-200:]!r})",
    )
    # The fact the reader relies on: without VLLM_SERVER_DEV_MODE this release has no
    # /server_info (SGLang's path) at all.
    try:
        with urllib.request.urlopen(engine.url + "/server_info", timeout=5) as r:
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    checks.check(code == 404, f"GET /server_info answers {code} (404: no live settings served)")


def check_core(checks: Checks, engine: Engine) -> dict[str, Any]:
    """The engine core's batch queue against what bubblewatch says this release keeps."""
    from bubblewatch.engines.vllm.batches import batches_in_flight

    path = engine.exec_log_dir / "core.json"
    facts = json.loads(path.read_text()) if path.exists() else {}
    model = batches_in_flight(VLLM_VERSION, 2)
    facts["bubblewatch_batches"] = model.batches
    facts["bubblewatch_why"] = model.why
    checks.check(
        facts.get("batch_queue_size") == model.batches,
        f"batches in flight: the engine core queues {facts.get('batch_queue_size')}, "
        f"bubblewatch says {model.batches} for {VLLM_VERSION} PP 2 ({model.why})",
    )
    return facts


def check_counts(checks: Checks, res: LoadResult, engine: Engine) -> dict[str, Any]:
    """The load reader against the engine's own gauges, and the engine against the client."""
    c = res.concurrency
    # Reads from 1 s in to the load's end: the drain after it (the last requests finishing,
    # fewer than C in flight) is not the load.
    steady_end = res.t0 + res.window_s if res.window_s > 0 else res.t1
    steady = [
        (t, end, lo, hi, r + w)
        for t, end, lo, hi, r, w in res.counts
        if res.t0 + 1.0 <= t and end <= steady_end and r is not None and w is not None
    ]
    # What /metrics served during each read (the API server's gauge log, engine_hook.py):
    # bubblewatch's reader must report one of those values, exactly.
    gauges = standin.read_counts(engine.exec_log_dir, "gauge")
    faithful = [e in standin.served_between(gauges, t, end) for t, end, _, _, e in steady]
    engine_total = np.array([e for *_, e in steady])
    lo = np.array([x for _, _, x, _, _ in steady])
    hi = np.array([x for _, _, _, x, _ in steady])
    # How far the engine's count lies outside what the client had in flight during the read.
    diff = np.maximum(lo - engine_total, 0) + np.maximum(engine_total - hi, 0)
    agree = float(np.mean(diff < 0.5)) if steady else 0.0
    mean_diff = float(np.mean(diff)) if steady else float("nan")
    bound = max(0.5, COUNT_TOLERANCE * c)
    med = float(np.median(engine_total)) if steady else float("nan")
    read_s = [end - t for t, end, *_ in steady]
    checks.check(len(steady) >= 5, f"C={c}: {len(steady)} reads of /metrics")
    checks.check(
        bool(gauges) and all(faithful),
        f"C={c}: every read's running + waiting is a value the engine's gauges held during "
        f"the read ({sum(faithful)} of {len(faithful)}; {len(gauges)} gauge updates logged)",
    )
    client_med = float(np.median(hi)) if steady else float("nan")
    checks.check(
        client_med == c,
        f"C={c}: the client held {c} in flight (median {client_med:g} during the reads)",
    )
    checks.check(med == c, f"C={c}: median running + waiting {med:g} == client's {c}")
    checks.check(
        mean_diff <= bound,
        f"C={c}: running + waiting lie {mean_diff:.2f} requests on average outside the "
        f"client's in-flight counts during the read (<= {bound:g}); {agree:.0%} within",
    )
    checks.check(not res.errors, f"C={c}: no failed requests ({res.errors[:1]})")
    return {
        "metrics_reads": len(steady),
        "reads_faithful": sum(faithful),
        "read_s_median": float(np.median(read_s)) if read_s else None,
        "read_s_max": max(read_s) if read_s else None,
        "agreement": agree,
        "mean_count_diff": mean_diff,
        "median_engine": med,
        "metric_failures": res.metric_failures,
    }
