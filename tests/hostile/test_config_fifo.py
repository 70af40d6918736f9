"""A FIFO (or any file that is not regular) as a config, web config, rule or secret file.

Pins: a FIFO as the config file hung the daemon at start, and on SIGHUP the
main loop blocked in `open()` waiting for a writer: analyses stopped and
SIGTERM was ignored until something wrote to the FIFO.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from daemon._proc import running, wait_for, write_config  # tests/daemon (pytest path)

from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.config.web import load_web_config
from bubblewatch.daemon.config.yamlsrc import ConfigError
from bubblewatch.limits import LimitError, read_capped
from bubblewatch.rules.loader import check_paths

ENV = {"STATE_DIRECTORY": "/nonexistent-state"}


def _bounded(fn: Callable[[], object], fifo: Path, timeout_s: float = 5.0) -> BaseException:
    """Run `fn`; if it blocks on the FIFO, unblock it (a writer) and fail. Returns its error."""
    caught: list[BaseException] = []

    def call() -> None:
        try:
            fn()
        except BaseException as e:
            caught.append(e)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)  # EOF for the blocked reader
        t.join(timeout_s)
        pytest.fail(f"reading the FIFO {fifo} blocked for {timeout_s:g} s")
    assert caught, "a FIFO was read as if it were a file"
    return caught[0]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    p = tmp_path / "fifo.yml"
    os.mkfifo(p)
    return p


def test_every_reader_refuses_a_fifo_at_once(tmp_path: Path, fifo: Path) -> None:
    e = _bounded(lambda: load_config(fifo, env=ENV), fifo)
    assert isinstance(e, ConfigError) and "not a regular file (a FIFO)" in e.reason
    assert e.path == str(fifo)
    e = _bounded(lambda: load_web_config(fifo), fifo)
    assert isinstance(e, ConfigError) and "not a regular file (a FIFO)" in e.reason
    cfg = tmp_path / "bw.yml"
    cfg.write_text(f"alerting:\n  receivers:\n    - {{name: a, url_file: {fifo}}}\n")
    e = _bounded(lambda: load_config(cfg, env=ENV), fifo)
    assert isinstance(e, ConfigError) and e.field == "alerting.receivers[0].url_file"
    assert "not a regular file (a FIFO)" in e.reason

    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    os.mkfifo(rules_dir / "a.rules.yaml")  # globbed from a rules directory

    def rules() -> None:
        _, errors = check_paths([rules_dir])
        raise errors[0]

    e = _bounded(rules, rules_dir / "a.rules.yaml")
    assert "not a regular file (a FIFO)" in str(e)


def test_a_directory_or_a_device_is_refused_by_its_kind(tmp_path: Path) -> None:
    with pytest.raises(LimitError, match=r"not a regular file \(a directory\)"):
        read_capped(tmp_path, 100)
    with pytest.raises(LimitError, match=r"not a regular file \(a character device\)"):
        read_capped("/dev/null", 100)
    (tmp_path / "ok").write_bytes(b"x" * 100)
    assert read_capped(tmp_path / "ok", 100) == b"x" * 100
    with pytest.raises(LimitError, match="larger than 99 bytes"):
        read_capped(tmp_path / "ok", 99)


def test_a_fifo_config_at_start_exits_2_at_once(fifo: Path) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bubblewatch", "run", "--config", str(fifo)],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the daemon hung at start on a FIFO config")
    assert done.returncode == 2, done.stderr
    assert "not a regular file (a FIFO)" in done.stderr and "Traceback" not in done.stderr


def test_sighup_with_a_fifo_config_keeps_the_daemon_responsive(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "bubblewatch.yml")
    fails = "reload failed; keeping the previous configuration and rules"
    with running(cfg) as d:
        wait_for(lambda: d.lines("ready"), timeout_s=30, what="the daemon to be ready")
        cfg.unlink()
        os.mkfifo(cfg)
        d.signal(signal.SIGHUP)
        try:
            wait_for(lambda: d.lines(fails), timeout_s=15, what="the failed reload")
        finally:
            if not d.lines(fails):  # unblock a reader stuck on it, so the test ends
                os.close(os.open(cfg, os.O_WRONLY | os.O_NONBLOCK))
        assert "not a regular file (a FIFO)" in d.lines(fails)[0]["error"]
        status, _ = d.get("/-/healthy")
        assert status == 200
        rc, took_s = d.stop()
    assert rc == 0 and took_s < 10 and "Traceback" not in d.log
