"""The detector on public recordings of real GPUs: false pipeline verdicts and labelled cases.

    .venv/bin/python benchmarks/real_data.py --source DIR [--source DIR ...] [-o FILE]

The recordings and what ran in each are listed in benchmarks/real_data_manifest.yaml
(repository, commit, path, the file in the repository that says what ran).
Each DIR holds clones or git directories of those repositories (`DIR/name`,
`DIR/owner/name`, `DIR/owner+name` or `DIR/owner+name/repo`); a file is read
at the manifest's commit with `git show COMMIT:PATH`, so the score is
reproducible whatever the clones' checked-out state.

Scored, on every recording of a job that is not a pipeline:
  * whole file: a pipeline verdict (serialized, healthy, imbalanced,
    launch_bound) as the primary verdict of `diagnose` without a topology;
  * 60 s windows (non-overlapping, as the daemon's sliding window sees them):
    the share of windows with a pipeline verdict;
and every labelled check of the manifest (verdicts accepted, a finding and the
GPUs it must name, the TP groups found without a topology, a training
pipeline's measured bubble against the one its schedule allows).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from bubblewatch.detect import Diagnosis, Verdict, diagnose
from bubblewatch.detect.segments import MIN_SEGMENT_S, phases
from bubblewatch.errors import InputError
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, Recording
from bubblewatch.model.schedule import PipelineSchedule
from bubblewatch.model.topology import Topology
from bubblewatch.sources.load import load_recording

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "benchmarks" / "real_data_manifest.yaml"
PIPELINE_VERDICTS = frozenset(
    {"serialized", "healthy", "imbalanced", "launch_bound", "below_schedule"}
)
WINDOW_S = 60.0
POWER = (Metric.POWER_AVG_W, Metric.POWER_INSTANT_W)
SIGNALS: dict[str, tuple[Metric, ...] | None] = {
    "all": None,  # every field the file has
    "power": POWER,  # power alone
    "power_util": (*POWER, Metric.KERNEL_BUSY_RATIO),  # what nvidia-smi gives
    # `--query-gpu=timestamp,power.draw,utilization.gpu`: no name either, so no known limit.
    "power_util_unnamed": (*POWER, Metric.KERNEL_BUSY_RATIO),
}
UNNAMED = frozenset({"power_util_unnamed"})


@dataclass(frozen=True)
class Check:
    name: str
    signal: str = "all"
    topology: Mapping[str, int] | None = None
    verdicts: tuple[str, ...] = ()
    finding: str | None = None
    holding_gpus: tuple[int, ...] | None = None
    groups: tuple[frozenset[int], ...] | None = None
    # Judge every 60 s window instead of the whole file; passes when at least this share
    # of the windows gets an accepted verdict.
    min_window_share: float | None = None
    # Judge only the span the file labels with this phase (its `phase` column).
    phase: str | None = None
    # Keep every n-th sample of each GPU (a coarser poller: 10 Hz to 1 Hz with 10).
    every: int = 1
    # Judge only [start, end] seconds from the file's start (a phase the file does not label).
    span_s: tuple[float, float] | None = None
    # A training pipeline's schedule (kind, micro-batches, virtual stages), the judgement
    # expected of its measured bubble against the schedule's ("as_good", "below", or
    # "unjudged"), and how close the measured bubble must come to the expected one.
    schedule: tuple[str, int, int] | None = None
    judgement: str | None = None
    bubble_within: float | None = None
    # Another instrument's record of the same run whose period is the step's (a node's
    # InfiniBand bytes: the pipeline's sends): file, column, phase; the detector's step
    # period must agree within 1%.
    step_reference: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Entry:
    id: str
    repository: str
    commit: str
    files: tuple[str, ...]
    what: str
    where: str
    pipeline: bool
    checks: tuple[Check, ...] = field(default_factory=tuple)
    saturated: bool = False
    no_collective_wait: bool = False
    steady_s: tuple[float, float] | None = None


@dataclass
class Outcome:
    entry: Entry
    error: str | None = None
    gpus: int = 0
    duration_s: float = 0.0
    interval_s: float = 0.0
    verdict: str = ""
    confidence: float = 0.0
    windows: int = 0
    pipeline_windows: int = 0
    window_verdicts: dict[str, int] = field(default_factory=dict)
    window_findings: dict[str, int] = field(default_factory=dict)  # findings anywhere in a window
    stagger_windows: int = 0  # windows judged a pipeline on their stagger alone
    steady_windows: int = 0
    steady_underfed: int = 0
    dominant: str = ""
    checks: list[tuple[Check, bool, str]] = field(default_factory=list)


def load_manifest(path: Path) -> list[Entry]:
    """The manifest's recordings; a malformed entry is an error naming it."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    sources = raw["sources"]
    out = []
    for i, r in enumerate(raw["recordings"]):
        where = f"{path}: recordings[{i}]"
        try:
            src = sources[r["source"]]
            checks = tuple(_check(c) for c in r.get("checks", ()))
            out.append(
                Entry(
                    id=str(r["id"]),
                    repository=str(src["repository"]),
                    commit=str(r.get("commit", src["commit"])),
                    files=tuple(str(f) for f in r["files"]),
                    what=" ".join(str(r["what"]).split()),
                    where=str(r["where"]),
                    pipeline=bool(r["pipeline"]),
                    checks=checks,
                    saturated=bool(r.get("saturated", False)),
                    no_collective_wait=bool(r.get("no_collective_wait", False)),
                    steady_s=None if "steady_s" not in r else tuple(r["steady_s"]),
                )
            )
        except (KeyError, TypeError, ValueError) as e:
            raise SystemExit(f"{where}: bad entry ({e!r})") from None
    return out


def _check(c: Mapping[str, Any]) -> Check:
    signal = str(c.get("signal", "all"))
    if signal not in SIGNALS:
        raise ValueError(f"signal must be one of {', '.join(SIGNALS)}, got {signal!r}")
    groups = c.get("groups")
    holding = c.get("holding_gpus")
    return Check(
        name=str(c["name"]),
        signal=signal,
        topology=c.get("topology"),
        verdicts=tuple(str(v) for v in c.get("verdicts", ())),
        finding=c.get("finding"),
        holding_gpus=None if holding is None else tuple(int(g) for g in holding),
        groups=None if groups is None else tuple(frozenset(int(g) for g in s) for s in groups),
        min_window_share=c.get("min_window_share"),
        phase=c.get("phase"),
        every=int(c.get("every", 1)),
        span_s=None if c.get("span_s") is None else (float(c["span_s"][0]), float(c["span_s"][1])),
        schedule=_schedule(c.get("schedule")),
        judgement=c.get("judgement"),
        bubble_within=c.get("bubble_within"),
        step_reference=c.get("step_reference"),
    )


def _schedule(raw: Any) -> tuple[str, int, int] | None:
    if raw is None:
        return None
    kind, m = str(raw["kind"]), int(raw["micro_batches"])
    v = int(raw.get("virtual_stages", 2 if kind == "interleaved" else 1))
    PipelineSchedule(kind, m, v)  # a bad schedule is a bad manifest entry
    return kind, m, v


def find_git_dir(repository: str, commit: str, roots: Sequence[Path]) -> Path | None:
    """A clone or git directory under one of `roots` that holds `commit`."""
    owner, name = repository.split("/", 1)
    for root in roots:
        for cand in (
            root / f"{owner}+{name}" / "repo",
            root / f"{owner}+{name}",
            root / owner / name,
            root / name,
            root,
        ):
            if cand.is_dir() and _has_commit(cand, commit):
                return cand
    return None


def _has_commit(git_dir: Path, commit: str) -> bool:
    r = subprocess.run(
        ["git", "-C", str(git_dir), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return r.returncode == 0


def extract(git_dir: Path, commit: str, path: str, out_dir: Path, k: int) -> Path:
    """`git show COMMIT:PATH` into out_dir; the file keeps its name (formats are sniffed)."""
    r = subprocess.run(
        ["git", "-C", str(git_dir), "show", f"{commit}:{path}"], capture_output=True, check=False
    )
    if r.returncode != 0:
        raise InputError(r.stderr.decode(errors="replace").strip(), path=f"{commit[:10]}:{path}")
    dest = out_dir / f"{k}_{Path(path).name}"
    dest.write_bytes(r.stdout)
    return dest


def load(entry: Entry, git_dir: Path, work: Path) -> Recording:
    paths = [extract(git_dir, entry.commit, f, work, k) for k, f in enumerate(entry.files)]
    recs = [load_recording(p) for p in paths]
    if len(recs) == 1:
        return recs[0]
    from bubblewatch.sources.side_by_side import join_side_by_side

    return join_side_by_side(recs, names=[str(p) for p in paths])


def keep_signal(rec: Recording, signal: str) -> Recording:
    """The recording with only the named signal's metrics (power limits dropped too)."""
    keep = SIGNALS[signal]
    if keep is None:
        return rec
    series = {
        g: GpuSeries(s.gpu, s.t_s, {m: v for m, v in s.values.items() if m in keep})
        for g, s in rec.series.items()
    }
    unnamed = signal in UNNAMED
    gpus = tuple(replace(g, power_limit_w=None, name=None if unnamed else g.name) for g in rec.gpus)
    return replace(rec, series=series, gpus=gpus)


def windows(rec: Recording, width_s: float) -> Iterable[Recording]:
    t0, t1 = rec.start_s, rec.end_s
    k = 0
    while t0 + (k + 1) * width_s <= t1 + 1e-9:
        yield rec.window(t0 + k * width_s, t0 + (k + 1) * width_s)
        k += 1


def _every(s: GpuSeries, n: int) -> GpuSeries:
    return GpuSeries(s.gpu, s.t_s[::n], {m: v[::n] for m, v in s.values.items()})


def labelled_span(rec: Recording, label: str) -> tuple[float, float] | None:
    """The span a file's own `phase` labels mark with `label` (first occurrence)."""
    marks = [e for e in rec.events if e.kind == "annotation"]
    for i, e in enumerate(marks):
        if e.detail.get("value") == label:
            later = [m.t_s for m in marks[i + 1 :] if m.detail.get("value") != label]
            return e.t_s, later[0] if later else rec.end_s
    return None


def reference_period(git_dir: Path, commit: str, ref: Mapping[str, str]) -> tuple[float, float]:
    """The period of another instrument's column over a labelled phase, and its mean per period.

    The same period search as the detector's (find_period), on a signal of its own.
    """
    import csv
    import io

    import numpy as np

    from bubblewatch.detect.steps import find_period

    r = subprocess.run(
        ["git", "-C", str(git_dir), "show", f"{commit}:{ref['file']}"],
        capture_output=True,
        check=False,
    )
    if r.returncode != 0:
        raise InputError(r.stderr.decode(errors="replace").strip(), path=ref["file"])
    rows = [
        row
        for row in csv.DictReader(io.StringIO(r.stdout.decode()))
        if "phase" not in ref or row.get("phase") == ref["phase"]
    ]
    t = np.array([float(row["timestamp"]) for row in rows])
    x = np.array([float(row[ref["column"]] or "nan") for row in rows])
    z = (x - np.nanmean(x)) / np.nanstd(x)
    step = float(np.median(np.diff(t)))
    found = find_period(t, np.nan_to_num(z)[None, :], step)
    if found is None:
        raise InputError(f"no period in column {ref['column']}", path=ref["file"])
    return found.period_s, float(np.nanmean(x)) * found.period_s


def run_check(
    rec: Recording, check: Check, reference: tuple[float, float] | None = None
) -> tuple[bool, str]:
    r = keep_signal(rec, check.signal)
    if check.every > 1:
        r = replace(r, series={g: _every(s, check.every) for g, s in r.series.items()})
    if check.span_s is not None:
        r = r.window(r.start_s + check.span_s[0], r.start_s + check.span_s[1])
    if check.phase is not None:
        span = labelled_span(r, check.phase)
        if span is None:
            return False, f"no {check.phase!r} phase in the file"
        r = r.window(*span)
    topo = None
    if check.topology is not None:
        topo = Topology.from_sizes(
            int(check.topology["pp_size"]), int(check.topology.get("tp_size", 1)), source="cli"
        )
    sched = None if check.schedule is None else PipelineSchedule(*check.schedule)
    if check.min_window_share is not None:
        ds = [diagnose(w, topo, schedule=sched) for w in windows(r, WINDOW_S)]
        got = [d.verdict.value + _judged(d) for d in ds]
        good = sum(d.verdict.value in check.verdicts and _schedule_ok(d, check)[0] for d in ds)
        share = good / len(got) if got else 0.0
        return share >= check.min_window_share, f"{good}/{len(got)} windows: {', '.join(got)}"
    d = diagnose(r, topo, schedule=sched)
    said = f"{d.verdict.value} {d.confidence:.2f}"
    conc = d.evidence.get("concurrency")
    if conc is not None:
        said += f", concurrency {conc}"
    ok = True
    if check.verdicts:
        ok = ok and d.verdict.value in check.verdicts
    if check.schedule is not None:
        sched_ok, sched_said = _schedule_ok(d, check)
        ok = ok and sched_ok
        said += sched_said
    if reference is not None:
        period = d.evidence.get("step_period_s")
        col = (check.step_reference or {}).get("column", "")
        said += f"; {col} repeats every {reference[0]:.3f} s, {reference[1] / 2**20:.1f} MiB a step"
        ok = ok and isinstance(period, float) and abs(period / reference[0] - 1.0) <= 0.01
    if check.finding is not None:
        found = [f for f in d.findings if f.verdict.value == check.finding]
        if not found:
            return False, said + f"; no {check.finding} finding"
        ev = found[0].evidence
        said += f"; {check.finding} holding {ev.get('holding_gpus')}"
        if check.holding_gpus is not None:
            ok = ok and tuple(ev.get("holding_gpus") or ()) == check.holding_gpus
    if check.groups is not None:
        got = d.evidence.get("inferred_stages") or []
        groups = tuple(frozenset(int(g) for g in s) for s in got)
        said += f"; groups {[sorted(s) for s in groups]}"
        said += f", stagger p = {d.evidence.get('stagger_p_value')}"
        ok = ok and set(groups) == set(check.groups)
    return ok, said


def _judged(d: Diagnosis) -> str:
    """A window's judgement against the schedule, for the report: `+` as good, `-` below."""
    j = d.evidence.get("schedule_judgement")
    return "" if j is None else "+" if j == "as_good" else "-"


def _schedule_ok(d: Diagnosis, check: Check) -> tuple[bool, str]:
    """The measured bubble against the schedule's: judgement and closeness as the check asks."""
    ev = d.evidence
    measured, expected = ev.get("measured_bubble_ratio"), ev.get("expected_bubble_ratio")
    judgement = ev.get("schedule_judgement") or "unjudged"
    said = f"; bubble {_pct(measured)} measured vs {_pct(expected)} by schedule ({judgement})"
    period = ev.get("step_period_s")
    if period is not None:
        busy = ev.get("stage_busy_s") or []
        said += f", step {period:.3f} s, busy/step {', '.join(f'{b:.3f}' for b in busy)} s"
    ok = check.judgement is None or judgement == check.judgement
    if check.bubble_within is not None:
        close = isinstance(measured, float) and isinstance(expected, float)
        ok = ok and close and abs(measured - expected) <= check.bubble_within  # type: ignore[operator]
    return ok, said


def _pct(x: object) -> str:
    return f"{x:.1%}" if isinstance(x, float) else "-"


def score(entry: Entry, roots: Sequence[Path]) -> Outcome:
    out = Outcome(entry)
    git_dir = find_git_dir(entry.repository, entry.commit, roots)
    if git_dir is None:
        out.error = f"no clone of {entry.repository} with commit {entry.commit[:10]}"
        return out
    with tempfile.TemporaryDirectory() as tmp:
        try:
            rec = load(entry, git_dir, Path(tmp))
        except InputError as e:
            out.error = "unreadable: " + str(e).replace(tmp + os.sep, "")
            return out
    out.gpus = len(rec.series)
    out.duration_s = rec.duration_s
    out.interval_s = float(rec.meta.get("interval_s") or _median_interval(rec))
    d = diagnose(rec)
    out.verdict, out.confidence = d.verdict.value, d.confidence
    found = phases(rec) if rec.duration_s >= 2 * MIN_SEGMENT_S else None
    out.dominant = "" if found is None or found.dominant is None else found.dominant.value
    steady = steady_span(entry, rec)
    for w in windows(rec, WINDOW_S):
        wd = diagnose(w)
        v = wd.verdict.value
        out.windows += 1
        out.window_verdicts[v] = out.window_verdicts.get(v, 0) + 1
        out.pipeline_windows += v in PIPELINE_VERDICTS
        out.stagger_windows += wd.evidence.get("pipeline_evidence") in ("stagger", "turn_taking")
        for f in {f.verdict.value for f in wd.findings}:
            out.window_findings[f] = out.window_findings.get(f, 0) + 1
        if steady is not None and steady[0] <= w.start_s and w.end_s <= steady[1]:
            out.steady_windows += 1
            out.steady_underfed += wd.has(Verdict.UNDERFED)
    for check in entry.checks:
        ref = None
        if check.step_reference is not None:
            try:
                ref = reference_period(git_dir, entry.commit, check.step_reference)
            except InputError as e:
                out.checks.append((check, False, f"reference: {e}"))
                continue
        ok, said = run_check(rec, check, ref)
        out.checks.append((check, ok, said))
    return out


def steady_span(entry: Entry, rec: Recording) -> tuple[float, float] | None:
    """The steady run of a saturated recording: from the manifest, else its `steady` label."""
    if not entry.saturated:
        return None
    if entry.steady_s is not None:
        return rec.start_s + entry.steady_s[0], rec.start_s + entry.steady_s[1]
    return labelled_span(rec, "steady")


def _median_interval(rec: Recording) -> float:
    import numpy as np

    diffs = [np.diff(s.t_s) for s in rec.series.values() if len(s) > 1]
    pooled = np.concatenate(diffs) if diffs else np.zeros(0)
    pooled = pooled[pooled > 0]
    return float(np.median(pooled)) if pooled.size else 0.0


def report(outcomes: list[Outcome], elapsed_s: float) -> str:
    lines = [
        f"bubblewatch on real recordings: {len(outcomes)} recordings ({elapsed_s:.0f} s)",
        "",
        "| recording | pipeline job | GPUs | length | whole file | dominant phase | 60 s windows "
        "with a pipeline verdict | window verdicts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        e = o.entry
        if o.error:
            lines.append(f"| {e.id} | {'yes' if e.pipeline else 'no'} | | | {o.error} | | | |")
            continue
        wv = ", ".join(f"{k} {n}" for k, n in sorted(o.window_verdicts.items()))
        lines.append(
            f"| {e.id} | {'yes' if e.pipeline else 'no'} | {o.gpus} | {o.duration_s:.0f} s "
            f"@ {o.interval_s:.2g} s | {o.verdict} {o.confidence:.2f} | {o.dominant or '-'} | "
            f"{o.pipeline_windows}/{o.windows} | {wv} |"
        )
    non = [o for o in outcomes if not o.entry.pipeline]
    read = [o for o in non if not o.error]
    false_files = sum(o.verdict in PIPELINE_VERDICTS for o in read)
    n_win = sum(o.windows for o in read)
    false_win = sum(o.pipeline_windows for o in read)
    pct = 100.0 * false_win / n_win if n_win else 0.0
    lines += [
        "",
        f"non-pipeline recordings: {len(non)}, read {len(read)}, unreadable or missing "
        f"{len(non) - len(read)}",
        f"whole files with a pipeline verdict: {false_files}/{len(read)}",
        f"60 s windows with a pipeline verdict: {false_win}/{n_win} ({pct:.1f}%)",
        f"60 s windows judged a pipeline on their stagger alone: "
        f"{sum(o.stagger_windows for o in read)}/{n_win}",
        "",
        "false alarms per finding (60 s windows of the recordings it cannot be true on):",
    ]
    for v in sorted(PIPELINE_VERDICTS | {"straggler"}):
        hits = sum(o.window_findings.get(v, 0) for o in read)
        lines.append(f"  {v} (any finding) on non-pipeline jobs: {hits}/{n_win}")
    no_cw = [o for o in read if o.entry.no_collective_wait]
    cw_win = sum(o.windows for o in no_cw)
    cw_hits = sum(o.window_findings.get("collective_wait", 0) for o in no_cw)
    lines.append(f"  collective_wait on runs with nothing to hold a collective: {cw_hits}/{cw_win}")
    sat = [o for o in outcomes if not o.error and o.entry.saturated]
    lines.append(
        f"  underfed in steady windows of compute-bound runs: "
        f"{sum(o.steady_underfed for o in sat)}/{sum(o.steady_windows for o in sat)}"
    )
    lines += ["", "labelled checks:"]
    n_ok = n_checks = 0
    for o in outcomes:
        if o.error and o.entry.checks:
            for c in o.entry.checks:
                n_checks += 1
                lines.append(f"  FAIL {o.entry.id}: {c.name}: {o.error}")
        for c, ok, said in o.checks:
            n_checks += 1
            n_ok += ok
            lines.append(f"  {'ok  ' if ok else 'FAIL'} {o.entry.id}: {c.name}: {said}")
    lines.append(f"labelled checks passed: {n_ok}/{n_checks}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="DIR",
        help="directory of clones or git directories of the manifest's repositories",
    )
    ap.add_argument("--manifest", default=str(MANIFEST), help="(default: %(default)s)")
    ap.add_argument("--only", action="append", metavar="ID", help="score only these recordings")
    ap.add_argument("-o", "--output", help="also write the report to this file")
    args = ap.parse_args(argv)
    roots = [Path(s) for s in args.source]
    if not roots:
        ap.error("give --source DIR (where the manifest's repositories are cloned)")
    entries = load_manifest(Path(args.manifest))
    if args.only:
        entries = [e for e in entries if e.id in set(args.only)]
    t0 = time.perf_counter()
    outcomes = []
    for i, e in enumerate(entries, 1):
        print(f"[{i}/{len(entries)}] {e.id} ...", file=sys.stderr, flush=True)
        outcomes.append(score(e, roots))
    text = report(outcomes, time.perf_counter() - t0)
    sys.stdout.write(text)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
