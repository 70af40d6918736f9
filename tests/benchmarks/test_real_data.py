"""benchmarks/real_data.py end to end on a throwaway git repository (no real data needed)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _module():
    spec = importlib.util.spec_from_file_location("real_data", ROOT / "benchmarks" / "real_data.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["real_data"] = mod
    spec.loader.exec_module(mod)
    return mod


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def _telemetry(path: Path, *, busy: bool) -> None:
    """4 GPUs at 10 Hz for 130 s: in-phase work, or a model loaded and nothing running."""
    rng = np.random.default_rng(0)
    rows = ["timestamp,phase,gpu,gpu_model,power_w,gpu_util_pct,sm_active"]
    for k in range(1300):
        common = rng.normal(0, 0.05)
        for g in range(4):
            if busy:
                sm = min(1.0, max(0.0, 0.8 + common + rng.normal(0, 0.01)))
                rows.append(
                    f"{1775333003 + 0.1 * k:.3f},steady,{g},NVIDIA H100 80GB HBM3,"
                    f"{400 + 300 * sm:.1f},100,{sm:.4f}"
                )
            else:
                rows.append(
                    f"{1775333003 + 0.1 * k:.3f},steady,{g},NVIDIA H100 80GB HBM3,"
                    f"{120 + rng.normal(0, 0.3):.1f},0,0.0"
                )
    path.write_text("\n".join(rows) + "\n")


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, str]:
    r = tmp_path / "someone+telemetry" / "repo"
    r.mkdir(parents=True)
    _git(r, "init", "-q")
    _git(r, "config", "user.email", "t@example.org")
    _git(r, "config", "user.name", "t")
    (r / "data").mkdir()
    _telemetry(r / "data" / "ddp.csv", busy=True)
    _telemetry(r / "data" / "idle.csv", busy=False)
    _git(r, "add", ".")
    _git(r, "commit", "-qm", "runs")
    return tmp_path, _git(r, "rev-parse", "HEAD")


def test_scores_recordings_read_from_git_at_the_commit(repo, tmp_path, capsys) -> None:
    source, commit = repo
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(
        f"""
sources:
  t: {{repository: someone/telemetry, commit: {commit}, licence: none}}
recordings:
  - id: ddp
    source: t
    files: [data/ddp.csv]
    what: four GPUs in phase
    where: nowhere
    pipeline: false
    no_collective_wait: true
  - id: idle
    source: t
    files: [data/idle.csv]
    what: a model loaded, nothing running
    where: nowhere
    pipeline: false
    checks:
      - name: idle without a power limit
        signal: power_util
        verdicts: [idle]
  - id: two-nodes
    source: t
    files: [data/ddp.csv, data/idle.csv]
    what: two files joined
    where: nowhere
    pipeline: false
  - id: gone
    source: t
    commit: 0123456789012345678901234567890123456789
    files: [data/ddp.csv]
    what: a commit nobody has
    where: nowhere
    pipeline: false
"""
    )
    out_file = tmp_path / "score.txt"
    mod = _module()
    assert (
        mod.main(["--source", str(source), "--manifest", str(manifest), "-o", str(out_file)]) == 0
    )
    text = capsys.readouterr().out
    assert out_file.read_text() == text
    assert "| ddp | no | 4 | 130 s @ 0.1 s | not_pipeline" in text
    assert "| two-nodes | no | 8 |" in text
    assert "no clone of someone/telemetry with commit 0123456789" in text
    assert "60 s windows with a pipeline verdict: 0/" in text
    assert "collective_wait on runs with nothing to hold a collective: 0/2" in text
    assert "ok   idle: idle without a power limit: idle" in text
    assert "labelled checks passed: 1/1" in text


def test_bad_manifest_entry_names_it(tmp_path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text("sources: {}\nrecordings:\n  - {id: x, source: nowhere}\n")
    with pytest.raises(SystemExit, match=r"recordings\[0\]: bad entry"):
        _module().load_manifest(manifest)


def test_the_shipped_manifest_is_complete() -> None:
    mod = _module()
    entries = mod.load_manifest(mod.MANIFEST)
    assert len(entries) >= 50 and len({e.id for e in entries}) == len(entries)
    assert all(len(e.commit) == 40 and e.what and e.where for e in entries)
    assert any(e.pipeline for e in entries) and any(e.checks for e in entries)
