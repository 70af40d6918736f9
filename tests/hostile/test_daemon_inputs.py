"""Hostile files read by the daemon: config, web config, secret files; at start and on SIGHUP.

Pins: a config nested ~300 levels gave a RecursionError traceback at start
and killed the daemon on SIGHUP (under systemd every restart then failed the
same way); the web config likewise; `sampling.history: 100000d` tried to
allocate 80 GiB; an alias bomb in a scenario wedged the main loop on SIGHUP;
a full spool disk at start was a QueueError traceback.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from daemon._proc import metric, running, wait_for, write_config  # tests/daemon (pytest path)

from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.config.web import load_web_config
from bubblewatch.daemon.config.yamlsrc import ConfigError

from ._files import yaml_alias_bomb, yaml_nested
from .conftest import fill

ENV = {"STATE_DIRECTORY": "/nonexistent-state"}


@pytest.mark.parametrize(
    ("text", "line", "expect"),
    [
        (yaml_nested("web"), 1, "nests deeper than 64 levels"),
        (yaml_alias_bomb("rules"), 6, "more than 50000 values"),
        ("log: &a {level: *a}\n", 1, "refers to itself"),
        ("sampling:\n  history: 100000d\n", 2, "more than 100000 samples per GPU"),
        ("sampling:\n  interval: 1s\n  history: 100001s\n", 3, "at most 100000s"),
        ("analysis:\n  window: 2h\nsampling:\n  history: 3h\n", 2, "at most 3600s"),
        ("alerting:\n  max_queue: " + "9" * 5000 + "\n", 2, "more than 30 digits"),
        ("log: {level: info}\n# " + "x" * (1 << 20) + "\n", None, "larger than 1048576"),
        ("log:\n  level: \0\n", 2, "not valid YAML"),
    ],
    ids=["nested", "alias-bomb", "self-alias", "history-100000d", "history-bound",
         "window", "int-5000", "over-1MiB", "nul"],
)  # fmt: skip
def test_config_file(tmp_path: Path, text: str, line: int | None, expect: str) -> None:
    p = tmp_path / "bw.yml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(p, env=ENV)
    assert e.value.path == str(p) and e.value.line == line, str(e.value)
    assert expect in e.value.reason


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (yaml_nested("basic_auth_users"), "nests deeper"),
        (yaml_alias_bomb("http_server_config"), "more than 50000 values"),
        (b"basic_auth_users:\n  \xff: x\n", "not UTF-8"),
        ('http_server_config:\n  headers:\n    X-A: "a\\r\\nSet-Cookie: x"\n', "CR, LF"),
        ("basic_auth_users:\n  bob: $2b$31$" + "a" * 53 + "\n", "cost must be 4..14"),
        # Transfer-Encoding: chunked on every answer broke every scrape
        ("http_server_config:\n  headers:\n    Transfer-Encoding: chunked\n",
         r"'Transfer-Encoding' cannot be configured \(exporter-toolkit allows Content-Security"),
        ("http_server_config:\n  headers:\n    X-Frame-Options: allowall\n",
         "must be one of deny, sameorigin, got 'allowall'"),
        # no TLS version left: every handshake failed
        ("tls_server_config:\n  cert_file: c.crt\n  key_file: k.key\n  min_version: TLS13\n"
         "  max_version: TLS10\n", "TLS10 is below min_version TLS13"),
    ],
    ids=["nested", "alias-bomb", "not-utf8", "header-crlf", "bcrypt-cost-31",
         "header-not-allowed", "header-value", "tls-range"],
)  # fmt: skip
def test_web_config_file(tmp_path: Path, text: str | bytes, expect: str) -> None:
    p = tmp_path / "web.yml"
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    (tmp_path / "c.crt").write_text("")  # refused before they are loaded
    (tmp_path / "k.key").write_text("")
    with pytest.raises(ConfigError, match=expect):
        load_web_config(p)


def test_endless_secret_file(tmp_path: Path) -> None:
    p = tmp_path / "bw.yml"
    p.write_text("alerting:\n  receivers:\n    - {name: a, url_file: /dev/zero}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, env=ENV)
    assert e.value.field == "alerting.receivers[0].url_file"
    assert "not a regular file (a character device)" in e.value.reason  # never read


def test_nested_config_at_start_exits_2_without_a_traceback(tmp_path: Path) -> None:
    cfg = tmp_path / "bw.yml"
    cfg.write_text(yaml_nested("web", 300))
    web = tmp_path / "web.yml"
    web.write_text(yaml_nested("tls_server_config", 300))
    for argv in (["--config", str(cfg)], ["--web.config.file", str(web)]):
        done = subprocess.run(
            [sys.executable, "-m", "bubblewatch", "run", "--simulate", "pp2-async", *argv],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and "nests deeper than 64 levels" in done.stderr


def test_sighup_with_hostile_files_keeps_the_daemon(tmp_path: Path) -> None:
    """A nested config, an alias-bomb scenario: each reload fails, the daemon runs on."""
    cfg = write_config(tmp_path / "bubblewatch.yml")
    fails = "reload failed; keeping the previous configuration and rules"
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(yaml_alias_bomb("faults"))
    with running(cfg) as d:
        assert metric(d.metrics(), "bubblewatch_config_last_reload_successful") == 1.0
        cfg.write_text(yaml_nested("web", 300))
        d.signal(signal.SIGHUP)
        wait_for(lambda: d.lines(fails), timeout_s=15, what="the failed reload")
        write_config(cfg, simulate=str(bomb))
        d.signal(signal.SIGHUP)
        wait_for(lambda: len(d.lines(fails)) >= 2, timeout_s=15, what="the second failed reload")
        errors = [x["error"] for x in d.lines(fails)]
        assert "nests deeper than 64 levels" in errors[0]
        assert "more than 50000 values" in errors[1] and str(bomb) in errors[1]
        assert metric(d.metrics(), "bubblewatch_config_last_reload_successful") == 0.0
        status, _ = d.get("/-/healthy")
        assert status == 200
        rc, _ = d.stop()
    assert rc == 0 and "Traceback" not in d.log


def test_full_spool_disk_at_start_is_said_not_a_traceback(tmp_path: Path, small_fs: Path) -> None:
    cfg = write_config(
        tmp_path / "bubblewatch.yml",
        alerting={
            "state_dir": str(small_fs / "state"),
            "receivers": [{"name": "hook", "url": "http://127.0.0.1:9/hook"}],
        },
    )
    fill(small_fs)
    with running(cfg) as d:
        wait_for(lambda: d.lines("ready"), timeout_s=30, what="the daemon to be ready")
        m = d.metrics()
        errors = metric(m, "bubblewatch_alert_spool_errors_total", receiver="hook")
        assert errors is not None and errors >= 1
        rc, _ = d.stop()
    assert rc == 0 and "Traceback" not in d.log
    assert d.lines("alert queue failed; alerts are held in memory and the disk is tried again")


def test_endless_config_and_web_config(tmp_path: Path) -> None:
    cfg, web = tmp_path / "bw.yml", tmp_path / "web.yml"
    cfg.symlink_to("/dev/zero")
    web.symlink_to("/dev/zero")
    endless = r"not a regular file \(a character device\)"  # refused before any read
    with pytest.raises(ConfigError, match=endless):
        load_config(cfg, env=ENV)
    with pytest.raises(ConfigError, match=endless):
        load_web_config(web)
    big = tmp_path / "big.yml"
    big.write_bytes(b"#" * ((1 << 20) + 1))
    with pytest.raises(ConfigError, match="larger than 1048576 bytes"):
        load_config(big, env=ENV)
