"""A corpus of real engine command lines, each read as its engine and release would read it.

For every entry (tests/topology/corpus/engine_cmdlines.yaml: source and release):
the parse gives the expected settings; every flag is one the release's parser
accepts (its generated flag table); placement on an 8-GPU host works or fails
with a clear message; and every command line the shipped rules render for it,
in the situations they are written for, is one that release accepts.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from bubblewatch.detect.types import Diagnosis, Finding, StageStats, Verdict
from bubblewatch.engines.flagtable import FlagTable, table_for
from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.topology import Topology
from bubblewatch.rules import load_rules, recommend
from bubblewatch.topology._launchers import recognise
from bubblewatch.topology.cmdline import parse_engine_cmdline
from bubblewatch.topology.endpoint import metrics_url
from bubblewatch.topology.engine_config import EngineConfig
from bubblewatch.topology.gpumap import GpuMapError, map_gpus

CORPUS: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "corpus" / "engine_cmdlines.yaml").read_text()
)
GPUS8 = [GpuInfo(index=i, uuid=f"GPU-{i:08x}-0000", name="GPU") for i in range(8)]


def test_the_corpus_is_large_and_covers_every_engine():
    assert len(CORPUS) >= 20
    assert {e["expect"]["engine"] for e in CORPUS} == {"sglang", "vllm", "trtllm"}
    assert all(e["source"] and e["cmd"] for e in CORPUS)
    assert len({e["id"] for e in CORPUS}) == len(CORPUS)


def _parse(entry: dict[str, Any]) -> EngineConfig:
    cfg = parse_engine_cmdline(shlex.split(entry["cmd"]), version=entry["version"])
    assert cfg is not None, entry["id"]
    return cfg


def _flag_names(argv: tuple[str, ...], engine: str) -> list[str]:
    """The flags of an engine's own arguments (vLLM -O/-cc aside, read specially)."""
    launch = recognise(argv)
    assert launch is not None
    out = []
    for tok in launch.args:
        if not tok.startswith("-") or tok == "-" or tok.lstrip("-").replace(".", "").isdigit():
            continue
        name = tok.partition("=")[0]
        if engine == "vllm" and (name.startswith("-O") or "." in name):
            continue  # -O3 is --optimization-level 3; -cc.key=value a config key
        out.append(name)
    return out


@pytest.mark.parametrize("entry", CORPUS, ids=[e["id"] for e in CORPUS])
def test_each_command_line_parses_as_its_engine_would(entry: dict[str, Any]) -> None:
    cfg = _parse(entry)
    for key, want in entry["expect"].items():
        if key == "engine":
            got: Any = cfg.name
        elif key == "metrics_url":
            got = metrics_url(cfg)
        elif key == "gpus":
            got = [list(s) for s in map_gpus(cfg, gpus=GPUS8).stages]
        elif key in ("graphs_off_by", "cuda_visible_devices"):
            got = None if getattr(cfg, key) is None else list(getattr(cfg, key))
        elif key == "env":
            got = {k: cfg.env.get(k) for k in want}
        else:
            got = getattr(cfg, key)
        assert got == want, (entry["id"], key)
    assert cfg.problems == (), entry["id"]


@pytest.mark.parametrize(
    "entry", [e for e in CORPUS if e["version"]], ids=[e["id"] for e in CORPUS if e["version"]]
)
def test_every_flag_is_one_that_release_accepts(entry: dict[str, Any]) -> None:
    table = table_for(entry["expect"]["engine"], entry["version"])
    assert table is not None and table.exact, entry["id"]
    for name in _flag_names(tuple(shlex.split(entry["cmd"])), table.engine):
        res = table.resolve(name)
        assert res.ok, (entry["id"], res.problem)


@pytest.mark.parametrize("entry", CORPUS, ids=[e["id"] for e in CORPUS])
def test_placement_on_eight_gpus_works_or_says_why(entry: dict[str, Any]) -> None:
    cfg = _parse(entry)
    if "placement_error" in entry:
        with pytest.raises(GpuMapError, match=entry["placement_error"]):
            map_gpus(cfg, gpus=GPUS8)
    elif cfg.world_size * cfg.dp_size <= 8 * cfg.nnodes:
        map_gpus(cfg, gpus=GPUS8)


def _stages(pp: int, occ: float) -> tuple[StageStats, ...]:
    return tuple(
        StageStats(s, (s,), occ, occ / 2, 0.9, 170.0, 85.0, 0.5, 0.0, 10.0) for s in range(pp)
    )


def _situations(pp: int) -> list[Diagnosis]:
    """Where the shipped rules fire: serialized under load, launch-bound, latency-bound."""
    ev = {"concurrency": 1.0, "bubble_ratio": 0.8, "launch_bound_index": 0.8, "spin_ratio": 0.5}
    serialized = Diagnosis(
        verdict=Verdict.SERIALIZED,
        confidence=0.9,
        findings=(Finding(Verdict.SERIALIZED, 0.9, "s"), Finding(Verdict.LAUNCH_BOUND, 0.8, "l")),
        stages=_stages(pp, 0.12),
        window_s=600.0,
        n_samples=600,
        load_limited=False,
        evidence={**ev, "running_requests": 16.0, "queued_requests": 4.0},
    )
    lonely = Diagnosis(
        verdict=Verdict.SERIALIZED,
        confidence=0.9,
        findings=(Finding(Verdict.SERIALIZED, 0.9, "s"),),
        stages=_stages(pp, 0.12),
        window_s=900.0,
        n_samples=900,
        load_limited=True,
        evidence={**ev, "running_requests": 1.0, "queued_requests": 0.0},
    )
    return [serialized, lonely]


def _check_rendered(argv: tuple[str, ...], table: FlagTable | None, engine: str, rid: str) -> None:
    cfg = parse_engine_cmdline(list(argv), version=None if table is None else table.version)
    assert cfg is not None, rid
    assert cfg.problems == (), rid
    if table is not None:
        for name in _flag_names(cfg.argv, engine):
            res = table.resolve(name)
            assert res.ok, (rid, res.problem)


@pytest.mark.parametrize("entry", CORPUS, ids=[e["id"] for e in CORPUS])
def test_every_fix_rendered_for_it_is_valid_for_its_release(entry: dict[str, Any]) -> None:
    cfg = _parse(entry)
    table = table_for(cfg.name, cfg.version)
    rules = load_rules()
    pp = max(cfg.pp_size, 2)  # the situations need a pipeline
    topo = replace(Topology.from_sizes(pp, 1), interconnect="pcie")
    if cfg.pp_size < 2:
        cfg = EngineConfig(**{**_fields(cfg), "pp_size": pp})
    rendered = 0
    for diag in _situations(pp):
        for rec in recommend(diag, cfg, topo, rules=rules):
            if rec.rendered is None:
                continue
            rendered += 1
            assert rec.rendered.valid, (entry["id"], rec.rule, rec.rendered.problems)
            assert "sk-" not in rec.rendered.command
            _check_rendered(rec.rendered.argv, table, cfg.name, f"{entry['id']} {rec.rule}")
            if table is None and cfg.name in ("sglang", "vllm") and rec.fix and rec.fix.add_flags:
                assert rec.rendered.caveat is not None, (entry["id"], rec.rule)
    if cfg.name in ("sglang", "vllm"):
        assert rendered > 0, entry["id"]


def _fields(cfg: EngineConfig) -> dict[str, Any]:
    from dataclasses import fields

    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}
