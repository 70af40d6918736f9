"""Config loading: defaults, overrides by flag, and errors that name file, line and key."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import pytest

from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.config.flags import OVERRIDES, add_arguments, overrides_from_args
from bubblewatch.daemon.config.listen import parse_listen_address
from bubblewatch.daemon.config.yamlsrc import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "packaging" / "bubblewatch.yml"


def write(tmp_path: Path, text: str, name: str = "bw.yml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def error_of(path: Path | None, overrides: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load_config(path, overrides, env={"STATE_DIRECTORY": "/var/lib/bubblewatch"})
    return e.value


def test_defaults_without_file() -> None:
    cfg = load_config(None, env={"STATE_DIRECTORY": "/var/lib/bubblewatch"})
    assert cfg.web.listen_address == ":9842" and cfg.sampling.interval_s == 1.0
    assert cfg.alerting.state_dir == Path("/var/lib/bubblewatch")
    assert cfg.alerting.receivers == ()


def test_example_config_loads(tmp_path) -> None:
    for f in ("ops-webhook.url", "ops-webhook.secret", "slack.url"):
        (tmp_path / f).write_text("https://hooks.example.invalid/xyz\n")
    text = EXAMPLE.read_text().replace("/etc/bubblewatch/", f"{tmp_path}/")
    cfg = load_config(write(tmp_path, text), env={})
    assert [r.type for r in cfg.alerting.receivers] == ["webhook", "slack", "alertmanager"]
    assert cfg.alerting.receivers[0].secret == "https://hooks.example.invalid/xyz"


def test_full_file_and_file_secrets(tmp_path) -> None:
    (tmp_path / "hook.url").write_text("https://hooks.example.invalid/T0/B0/XXXX\n")
    p = write(
        tmp_path,
        """\
        web:
          listen_address: "127.0.0.1:9999"
        sampling: {interval: 250ms, history: 15m}
        analysis: {interval: 5s, window: 30s}
        alerting:
          state_dir: state
          repeat_interval: 1h
          timeout: 2s
          receivers:
            - name: slack
              type: slack
              url_file: hook.url
            - name: ops
              url: http://127.0.0.1:8080/hook
              secret: abc
              max_queue: 10
              initial_backoff: 100ms
        log: {level: debug, format: json}
        """,
    )
    cfg = load_config(p, env={})
    assert cfg.sampling.interval_s == 0.25 and cfg.sampling.history_s == 900
    assert cfg.alerting.state_dir == tmp_path / "state"
    slack, ops = cfg.alerting.receivers
    assert slack.url == "https://hooks.example.invalid/T0/B0/XXXX"
    assert slack.retry.timeout_s == 2.0 and ops.retry.initial_backoff_s == 0.1
    assert ops.max_queue == 10 and ops.secret == "abc"
    summary = repr(cfg.summary())
    assert "XXXX" not in summary and "abc" not in summary and "8080" not in summary
    assert "XXXX" not in repr(cfg) and "'abc'" not in repr(cfg)


@pytest.mark.parametrize(
    ("yaml_text", "line", "field", "reason"),
    [
        ("sampling:\n  interval: 50ms\n", 2, "sampling.interval", "at least 0.1s"),
        ("sampling:\n  interval: fast\n", 2, "sampling.interval", "duration like '10s'"),
        ("web:\n  listen_adress: ':1'\n", 2, "web.listen_adress", "unknown key"),
        ("web:\n  listen_address: '::1:9'\n", 2, "web.listen_address", "brackets"),
        ("log:\n  level: loud\n", 2, "log.level", "one of debug, info"),
        (
            "analysis:\n  window: 10s\nsampling:\n  history: 5s\n",
            4,
            "sampling.history",
            "at least analysis.window",
        ),
        (
            "alerting:\n  receivers:\n    - name: a\n      type: pager\n      url: http://x\n",
            4,
            "alerting.receivers[0].type",
            "webhook, slack, alertmanager",
        ),
        (
            "alerting:\n  receivers:\n    - name: a\n",
            3,
            "alerting.receivers[0].url",
            "needs 'url' or 'url_file'",
        ),
        (
            "alerting:\n  receivers:\n    - {name: a, url: 'ftp://x'}\n",
            3,
            "alerting.receivers[0].url",
            "http:// or https://",
        ),
        (
            "alerting:\n  receivers:\n    - {name: a, url: 'http://x'}\n    - {name: a, url: 'http://y'}\n",
            4,
            "alerting.receivers[1].name",
            "already used (line 3)",
        ),
        (
            "alerting:\n  receivers:\n    - {name: a, type: slack, url: 'http://x', secret: s}\n",
            3,
            "alerting.receivers[0].secret",
            "only 'webhook' receivers sign",
        ),
        ("alerting:\n  max_queue: 0\n", 2, "alerting.max_queue", "must be >= 1"),
        ("alerting:\n  max_queue: many\n", 2, "alerting.max_queue", "expected an integer"),
    ],
)
def test_errors_name_file_line_and_key(tmp_path, yaml_text, line, field, reason) -> None:
    p = write(tmp_path, yaml_text)
    e = error_of(p)
    assert (e.path, e.line, e.field) == (str(p), line, field)
    assert reason in e.reason
    assert str(e).startswith(f"{p}:{line}: field {field!r}: ")


def test_yaml_syntax_error_and_duplicate_key(tmp_path) -> None:
    e = error_of(write(tmp_path, "web:\n  listen_address: [\n"))
    assert e.path.endswith("bw.yml") and e.line == 3 and "not valid YAML" in e.reason
    e = error_of(write(tmp_path, "web: {}\nweb: {}\n"))
    assert e.line == 2 and "duplicate key 'web'" in e.reason
    e = error_of(write(tmp_path, "- a\n"))
    assert "top level must be a mapping" in e.reason
    e = error_of(tmp_path / "missing.yml")
    assert "cannot read" in e.reason and e.path.endswith("missing.yml")


def test_secret_file_errors_do_not_echo_secrets(tmp_path) -> None:
    p = write(tmp_path, "alerting:\n  receivers:\n    - {name: a, url: 'http://x', url_file: u}\n")
    e = error_of(p)
    assert e.field == "alerting.receivers[0].url_file" and "not both" in e.reason
    (tmp_path / "empty").write_text("\n")
    p = write(tmp_path, "alerting:\n  receivers:\n    - {name: a, url_file: empty}\n")
    assert "is empty" in error_of(p).reason


def test_flags_override_file_and_errors_name_the_flag(tmp_path) -> None:
    p = write(tmp_path, "web:\n  listen_address: ':1234'\nsampling:\n  interval: 1s\n")
    cfg = load_config(
        p,
        {
            "--web.listen-address": "127.0.0.1:0",
            "--sampling.interval": "2s",
            "--analysis.window": "1m",
        },
        env={},
    )
    assert cfg.web.listen_address == "127.0.0.1:0"
    assert cfg.sampling.interval_s == 2.0 and cfg.analysis.window_s == 60.0
    e = error_of(p, {"--sampling.interval": "soon"})
    assert (e.path, e.field) == ("command line", "--sampling.interval")
    e = error_of(p, {"--sampling.interval": "10ms"})
    assert (e.path, e.field) == ("command line", "--sampling.interval")
    assert "at least 0.1s" in e.reason
    e = error_of(None, {"--log.level": "chatty"})
    assert e.field == "--log.level"


def test_argparse_flags_round_trip() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--config", "x.yml", "--web.listen-address", ":1", "--alerting.repeat-interval", "2h"]
    )
    assert args.config_file == "x.yml"
    assert overrides_from_args(args) == {
        "--web.listen-address": ":1",
        "--alerting.repeat-interval": "2h",
    }
    assert len({o.flag for o in OVERRIDES}) == len(OVERRIDES)
    assert load_config(None, {"--simulate": "pp8-async"}, env={}).simulate == "pp8-async"


def test_listen_address_forms() -> None:
    assert parse_listen_address(":9842") == ("", 9842)
    assert parse_listen_address("[::1]:80") == ("::1", 80)
    assert parse_listen_address("0.0.0.0:0") == ("0.0.0.0", 0)
    for bad in ("9842", "host:", "h:70000"):
        with pytest.raises(ValueError):
            parse_listen_address(bad)


def test_peak_horizon_default_file_flag_and_bounds(tmp_path: Path) -> None:
    """analysis.peak_horizon (issue 18): the operator sets the horizon the fill knobs hold."""
    assert load_config(None, env={}).analysis.peak_horizon_s == 86_400.0
    cfg = load_config(write(tmp_path, "analysis: {peak_horizon: 7d}\n"), env={})
    assert cfg.analysis.peak_horizon_s == 7 * 86_400.0
    assert cfg.summary()["analysis"]["peak_horizon_s"] == 7 * 86_400.0
    flag = load_config(None, {"--analysis.peak-horizon": "6h"}, env={})
    assert flag.analysis.peak_horizon_s == 6 * 3600.0
    too_long = error_of(write(tmp_path, "analysis: {peak_horizon: 31d}\n"))
    assert "peak_horizon" in str(too_long) and "30d" in str(too_long)
    short = error_of(write(tmp_path, "analysis: {window: 60s, peak_horizon: 30s}\n"))
    assert "at least one analysis.window" in str(short)
    assert "peak_horizon" in str(error_of(write(tmp_path, "analysis: {peak_horizon: soon}\n")))
