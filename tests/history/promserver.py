"""A real Prometheus for tests: backfill OpenMetrics text with promtool, serve it, stop it."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Family:
    """One metric family: name, help, and samples (labels, value, timestamp in s)."""

    name: str
    help: str
    samples: Sequence[tuple[Mapping[str, str], float, float]]


def openmetrics(families: Sequence[Family]) -> str:
    """OpenMetrics text: each family's samples together, every series in time order."""
    out: list[str] = []
    for fam in families:
        out.append(f"# HELP {fam.name} {fam.help}")
        out.append(f"# TYPE {fam.name} gauge")
        rows = sorted(fam.samples, key=lambda s: (sorted(s[0].items()), s[2]))
        for labels, value, t in rows:
            lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
            out.append(f"{fam.name}{{{lab}}} {value:g} {t:.3f}")
    out.append("# EOF")
    return "\n".join(out) + "\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def prometheus_with(text: str, workdir: Path) -> Iterator[str]:
    """Backfill `text`, start Prometheus on a free port, yield its URL; always stop it."""
    assert PROMETHEUS and PROMTOOL
    data = workdir / "data"
    data.mkdir(parents=True)
    src = workdir / "metrics.om"
    src.write_text(text)
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(src), str(data)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")
    port = _free_port()
    log = (workdir / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=3650d",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(workdir / 'prometheus.log').read_text()}")
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus not ready within 30 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
