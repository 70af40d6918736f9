"""Bounds of docs/daemon.md, "Limits" that had no test (tests/daemon/test_limits_table.py).

A rule set over its rule count, a receiver's secret file over its size, a
file whose reading outlasts the deadline, a profiler value beyond its length:
each is refused with a clear error naming what is wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bubblewatch import limits
from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.config.yamlsrc import ConfigError
from bubblewatch.limits import READ_DEADLINE_S, SECRET_FILE_MAX_BYTES, LimitError, read_capped
from bubblewatch.rules import check_paths
from bubblewatch.rules.loader import MAX_RULES
from bubblewatch.sources.kineto import _jsonstream

from .test_recorded_inputs import KINETO_HEAD, kineto_event, refused, write

RULE = """\
      - name: R{i}
        expr: diagnosis.verdict == "serialized"
        severity: info
        summary: "r"
"""


def _rule_file(path: Path, n: int) -> Path:
    body = "version: 1\ngroups:\n  - name: g\n    rules:\n"
    return write(path, body + "".join(RULE.format(i=i) for i in range(n)))


def test_a_rule_set_beyond_500_rules_is_refused(tmp_path: Path) -> None:
    _, ok = check_paths([_rule_file(tmp_path / "a.rules.yaml", MAX_RULES)])
    assert ok == []
    _, errors = check_paths([_rule_file(tmp_path / "b.rules.yaml", MAX_RULES + 1)])
    assert [str(e) for e in errors if f"more than {MAX_RULES} rules" in str(e)], errors


def test_a_secret_file_over_64_kib_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "hmac.secret"
    cfg = tmp_path / "bw.yml"
    cfg.write_text(
        "alerting:\n  receivers:\n"
        f"    - {{name: a, url: 'http://127.0.0.1:9/', secret_file: {secret}}}\n"
    )
    secret.write_bytes(b"s" * SECRET_FILE_MAX_BYTES)
    load_config(cfg, env={})  # at the bound: read
    secret.write_bytes(b"s" * (SECRET_FILE_MAX_BYTES + 1))
    with pytest.raises(ConfigError) as e:
        load_config(cfg, env={})
    assert e.value.field == "alerting.receivers[0].secret_file"
    assert f"larger than {SECRET_FILE_MAX_BYTES} bytes" in str(e.value)
    assert "sss" not in str(e.value)  # a secret is never echoed


def test_a_file_read_past_the_deadline_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that reads slowly (a stalled network file system) is given up, not waited on."""
    p = tmp_path / "bw.yml"
    p.write_bytes(b"#" * (4 << 16))  # four reads of 64 KiB
    assert len(read_capped(p, 1 << 20)) == 4 << 16
    now = [0.0]

    def slow_clock() -> float:  # each read takes 4 s
        now[0] += 4.0
        return now[0]

    monkeypatch.setattr(limits.time, "monotonic", slow_clock)
    with pytest.raises(LimitError, match=f"not read within {READ_DEADLINE_S:g} s"):
        read_capped(p, 1 << 20)


def test_a_kineto_value_over_the_bound_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A string that never ends is not read to the end of the file (64 MiB in force; 64 KiB
    here, the same code path)."""
    monkeypatch.setattr(_jsonstream, "MAX_VALUE_CHARS", 64 << 10)
    endless = b'{"ph":"X","ts":1,"dur":1,"pid":0,"tid":0,"name":"' + b"k" * (4 << 20)
    p = write(tmp_path / "rank0.trace.json", KINETO_HEAD + kineto_event() + b"," + endless)
    refused(capsys, ["analyze", str(p)], str(p), f"longer than {64 << 10} characters")
