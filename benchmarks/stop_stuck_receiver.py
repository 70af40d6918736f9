"""Stopping with an alert request stuck: a receiver that accepts, reads and never answers.

    PYTHONPATH=. .venv/bin/python benchmarks/stop_stuck_receiver.py [-o FILE] [--runs 5]

The daemon runs the package PYTHONPATH names (so another checkout's
package, the code before a change, can be measured with the same script).

Two measurements, each `--runs` times, against one loopback receiver that
holds every connection open without a byte of answer (the receivers' timeout
is 30 s):

- `AlertDispatcher.close()` in this process, once the alert's request has
  reached the receiver: the seconds close takes, and the alerts left in the
  spool for the next start;
- the real daemon (`bubblewatch run`, simulated pp8-serialized GPUs, a rule
  that always fires): SIGTERM once the receiver has the request, then the
  seconds from the signal to the process's exit, and from its `stopping` to
  its `stopped` log line (the daemon's own shutdown, without the
  interpreter's exit), and the alerts in the spool after it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

import bubblewatch
from bubblewatch.sinks.alerts import Alert, AlertDispatcher, ReceiverConfig, RetryPolicy

# The receiver the abort tests use (tests/hostile/_http.py), from this script's checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from hostile._http import HangingReceiver as Receiver

ROOT = Path(bubblewatch.__file__).resolve().parents[1]  # the checkout PYTHONPATH names
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
RULES = """version: 1
groups:
  - name: bench
    rules:
      - name: Always
        expr: "true"
        severity: warning
        summary: always fires
"""


def spooled(state_dir: Path) -> int:
    with contextlib.closing(sqlite3.connect(state_dir / "alerts-hook.sqlite3")) as db:
        return int(db.execute("SELECT count(*) FROM items").fetchone()[0])


def dispatcher_close(rec: Receiver, state_dir: Path) -> tuple[float, int]:
    rec.asked.clear()
    cfg = ReceiverConfig("hook", "webhook", rec.url, retry=RetryPolicy(timeout_s=30.0))
    disp = AlertDispatcher([cfg], state_dir, repeat_interval_s=3600)
    disp.notify([Alert(labels={"alertname": "Bench", "pipeline": "p"}, starts_at_s=1.0)], 1.0)
    if not rec.asked.wait(30):
        raise SystemExit("the receiver never got the alert")
    time.sleep(0.3)  # the worker waits for the answer now
    t0 = time.perf_counter()
    disp.close(5.0)
    return time.perf_counter() - t0, spooled(state_dir)


def _log_time(log: str, msg: str) -> float:
    for line in log.splitlines():
        if f"msg={msg} " in line:
            ts = line.split()[0].removeprefix("ts=").replace("Z", "+00:00")
            return datetime.fromisoformat(ts).timestamp()
    raise SystemExit(f"no {msg!r} line in the daemon's log:\n{log[-2000:]}")


def daemon_stop(rec: Receiver, work: Path) -> tuple[float, float, int]:
    rec.asked.clear()
    (work / "always.rules.yaml").write_text(RULES)
    cfg = {
        "web": {"listen_address": "127.0.0.1:0"},
        "sampling": {"interval": "200ms", "history": "30s"},
        "analysis": {"interval": "1s", "window": "3s"},
        "rules": {"files": [str(work / "always.rules.yaml")]},
        "alerting": {
            "state_dir": str(work / "state"),
            "timeout": "30s",
            "receivers": [{"name": "hook", "url": rec.url}],
        },
        "simulate": "pp8-serialized",
    }
    (work / "bubblewatch.yml").write_text(yaml.safe_dump(cfg))
    log_path = work / "daemon.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bubblewatch", "run", "--config", str(work / "bubblewatch.yml")],
            stderr=log, stdout=subprocess.DEVNULL, env=ENV, cwd=ROOT,
        )  # fmt: skip
        try:
            if not rec.asked.wait(60):
                raise SystemExit(f"the daemon never sent the alert:\n{log_path.read_text()}")
            time.sleep(0.3)
            t0 = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(60)
            exit_s = time.perf_counter() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if rc != 0:
        raise SystemExit(f"the daemon exited {rc}")
    text = log_path.read_text()
    own_s = _log_time(text, "stopped") - _log_time(text, "stopping")
    return exit_s, own_s, spooled(work / "state")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", type=Path, help="also write the results here")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    rec = Receiver()
    rows: list[dict[str, object]] = []
    try:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory() as d:
                close_s, kept = dispatcher_close(rec, Path(d))
            rows.append({"what": "dispatcher close", "run": i, "s": close_s, "spooled": kept})
        for i in range(args.runs):
            with tempfile.TemporaryDirectory() as d:
                exit_s, own_s, kept = daemon_stop(rec, Path(d))
            rows.append({"what": "daemon SIGTERM to exit", "run": i, "s": exit_s, "spooled": kept})
            rows.append({"what": "daemon stopping to stopped", "run": i, "s": own_s})
    finally:
        rec.close()
    lines = [json.dumps(r) for r in rows]
    for what in ("dispatcher close", "daemon SIGTERM to exit", "daemon stopping to stopped"):
        vals = [float(r["s"]) for r in rows if r["what"] == what]  # type: ignore[arg-type]
        lines.append(
            f"{what}: median {statistics.median(vals):.3f} s, "
            f"min {min(vals):.3f}, max {max(vals):.3f} ({len(vals)} runs; receiver timeout 30 s)"
        )
    out = "\n".join(lines) + "\n"
    sys.stdout.write(out)
    if args.output:
        args.output.write_text(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
