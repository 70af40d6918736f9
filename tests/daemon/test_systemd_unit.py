"""The shipped systemd unit: required settings, `systemd-analyze verify` and its security score."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "packaging" / "systemd" / "bubblewatch.service"
MAX_EXPOSURE = 3.0


def settings() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_unit_has_the_required_settings() -> None:
    s = settings()
    for key, value in {
        "Type": "notify", "Restart": "on-failure", "ExecReload": "/bin/kill -HUP $MAINPID",
        "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
        "NoNewPrivileges": "yes", "CapabilityBoundingSet": "", "StateDirectory": "bubblewatch",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
        "LimitNOFILE": "8192",  # the HTTP connection cap needs descriptors (was the 1024 default)
    }.items():  # fmt: skip
        assert s.get(key) == [value], key
    assert "@system-service" in s["SystemCallFilter"]
    assert "WatchdogSec" in s and "SupplementaryGroups" in s
    assert any("nvidia" in d for d in s["DeviceAllow"])


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed (apt-get install systemd)")
    return subprocess.run(["systemd-analyze", *args], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def test_systemd_analyze_verify(tmp_path) -> None:
    # verify insists that ExecStart exists, so point it at this checkout's entry point.
    exe = Path(sys.executable).with_name("bubblewatch")
    if not exe.exists():
        pytest.skip(f"{exe} not installed (pip install -e .)")
    unit = tmp_path / "bubblewatch.service"
    unit.write_text(UNIT.read_text().replace("/usr/bin/bubblewatch", str(exe)))
    proc = analyze("verify", str(unit))
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


def test_systemd_analyze_security_score() -> None:
    proc = analyze("security", "--offline=yes", str(UNIT))
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", proc.stdout)
    assert m, proc.stdout[-2000:] + proc.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE
