"""Receivers that could never deliver are refused at load, naming the field, never the secret.

Pins: a header value with CR/LF and a URL with `user:pw@` passed the config
check and failed every delivery; `alerting.timeout: 0s` was reported against
`alerting.max_backoff`, wrapped twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.config.yamlsrc import ConfigError


def error_of(tmp_path: Path, text: str) -> ConfigError:
    p = tmp_path / "bw.yml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(p, env={"STATE_DIRECTORY": str(tmp_path)})
    return e.value


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [
        (
            'alerting:\n  receivers:\n    - name: a\n      url: http://127.0.0.1:1/\n'
            '      headers:\n        X-Token: "abc\\r\\nX-Injected: 1"\n',
            6, "alerting.receivers[0].headers.X-Token", "CR, LF",
        ),
        (
            'alerting:\n  receivers:\n    - name: a\n      url: http://127.0.0.1:1/\n'
            '      headers:\n        "Bad Name": x\n',
            6, "alerting.receivers[0].headers.Bad Name", "not an HTTP token",
        ),
        (
            "alerting:\n  receivers:\n    - {name: a, type: slack, "
            "url: 'https://u:hunter2@hooks.slack.invalid/x'}\n",
            3, "alerting.receivers[0].url", "no user:password@",
        ),
        (
            "alerting:\n  receivers:\n    - {name: a, url: 'https://u:hunter2@h.invalid/x', "
            "headers: {Authorization: 'Bearer t'}}\n",
            3, "alerting.receivers[0].url", "not both",
        ),
        (
            "alerting:\n  receivers:\n    - {name: a, url: 'http://host:port/x'}\n",
            3, "alerting.receivers[0].url", "not a valid URL",
        ),
        (
            "alerting:\n  receivers:\n    - {name: a, url: 'http:///x'}\n",
            3, "alerting.receivers[0].url", "no host",
        ),
        ("alerting:\n  timeout: 0s\n", 2, "alerting.timeout", "positive duration"),
        (
            "alerting:\n  initial_backoff: 10m\n  max_backoff: 1m\n",
            3, "alerting.max_backoff", "at least initial_backoff (600s)",
        ),
        (
            "alerting:\n  receivers:\n    - {name: a, url: 'http://x/', timeout: 0s}\n",
            3, "alerting.receivers[0].timeout", "positive duration",
        ),
    ],
)  # fmt: skip
def test_refused_at_load_naming_the_field(
    tmp_path: Path, text: str, line: int, field: str, reason: str
) -> None:
    e = error_of(tmp_path, text)
    assert (e.line, e.field) == (line, field), str(e)
    assert reason in e.reason
    assert str(e).count(str(tmp_path / "bw.yml")) == 1  # wrapped once, not twice
    assert "hunter2" not in str(e) and "abc" not in str(e)


def test_url_file_credentials_are_refused_against_url_file(tmp_path: Path) -> None:
    (tmp_path / "u").write_text("https://u:hunter2@hooks.slack.invalid/x\n")
    e = error_of(tmp_path, "alerting:\n  receivers:\n    - {name: a, type: slack, url_file: u}\n")
    assert e.field == "alerting.receivers[0].url_file" and "hunter2" not in str(e)


def test_credentials_in_a_webhook_url_are_accepted_and_kept_out_of_the_summary(
    tmp_path: Path,
) -> None:
    p = tmp_path / "bw.yml"
    p.write_text("alerting:\n  receivers:\n    - {name: a, url: 'https://u:hunter2@h.invalid/x'}\n")
    cfg = load_config(p, env={"STATE_DIRECTORY": str(tmp_path)})
    assert "hunter2" not in repr(cfg) and "hunter2" not in repr(cfg.summary())
