"""Adding an engine is one package (docs/engines.md): a toy engine, registered, is seen end to end.

`toyserve` (tests/engines/toyserve: an `Engine` and its flag table) is
registered, then recognised on a command line and in a static topology file,
its load read from its own gauges, its slots and ceiling in the engine facts,
and a rule's fix rendered with the spelling of its release and its live call,
with no code outside its package naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bubblewatch import engines
from bubblewatch.engines.flagtable import release_spelling, table_for
from bubblewatch.rules import load_rules
from bubblewatch.rules.engine_facts import engine_facts
from bubblewatch.rules.evaluate import evaluate, target_of
from bubblewatch.rules.facts import facts_from_mapping
from bubblewatch.rules.render import Fix, render_fix
from bubblewatch.sources.engine_metrics import parse_load_figures
from bubblewatch.topology._launchers import detect_engine
from bubblewatch.topology.cmdline import parse_engine_cmdline
from bubblewatch.topology.static import load_static_pipelines

from .toyserve import ENGINE as TOY

CMD = "toyserve serve toy-model --pp 4 --tp 2 --max-seqs 64 --slot-cap 2 --port 9100"


@pytest.fixture(autouse=True)
def toy() -> Iterator[None]:
    engines.register(TOY)
    try:
        yield
    finally:
        engines.unregister(TOY.name)


def test_registered_engine_is_looked_up_by_name_and_refused_twice() -> None:
    assert engines.get("toyserve") is TOY and "toyserve" in engines.names()
    with pytest.raises(ValueError, match="already registered"):
        engines.register(TOY)
    with pytest.raises(ValueError, match="built in"):
        engines.unregister("sglang")


def test_its_command_line_is_discovered_with_its_own_flags() -> None:
    assert detect_engine(CMD.split()) == "toyserve"
    cfg = parse_engine_cmdline(CMD.split(), {"TOYSERVE_LAYERS": "10,10,10,11"}, version="2.0")
    assert cfg is not None
    assert (cfg.name, cfg.pp_size, cfg.tp_size) == ("toyserve", 4, 2)
    assert (cfg.pp_max_micro_batch_size, cfg.max_running_requests, cfg.port) == (2, 64, 9100)
    assert cfg.layer_partition == (10, 10, 10, 11)
    assert cfg.model == "toy-model" and cfg.problems == ()


def test_a_bad_value_names_its_flag() -> None:
    with pytest.raises(Exception, match=r"--slot-cap must be >= 1, got 0"):
        parse_engine_cmdline(["toyserve", "serve", "m", "--slot-cap", "0"])


def test_a_static_topology_file_may_name_it(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(
        f"version: 1\npipelines:\n  - id: toy\n    engine: toyserve\n    cmdline: {CMD!r}\n",
        encoding="utf-8",
    )
    (pipe,) = load_static_pipelines(str(path))
    assert pipe.topology.engine == "toyserve"
    # Rank order: stage s on GPUs 2s, 2s + 1 (RankOrder, the default placement).
    assert pipe.topology.stages == ((0, 1), (2, 3), (4, 5), (6, 7))


def test_its_load_is_read_from_its_own_gauges() -> None:
    text = "toyserve:running 12\ntoyserve:waiting 3\n"
    figures = parse_load_figures(text)
    assert (figures.running, figures.queued, figures.micro_batch) == (12.0, 3.0, None)


def test_its_flag_table_and_renamed_flag() -> None:
    old, new = table_for("toyserve", "1.0"), table_for("toyserve", "2.0")
    assert old is not None and new is not None
    assert release_spelling(old, "--slot-cap") == "--legacy-slot-cap"
    assert release_spelling(new, "--slot-cap") == "--slot-cap"
    assert table_for("toyserve", "0.9") is None  # older than every table: unknown


def test_its_facts_carry_its_scheduler_policy() -> None:
    cfg = parse_engine_cmdline(CMD.split(), version="1.0")
    facts = engine_facts(cfg)
    assert facts["micro_batch_slots"] == 5  # pp + 1
    assert facts["requests_ceiling"] == 10  # 5 slots x cap 2, below --max-seqs 64
    assert facts["micro_batch_cap_flag"] == "--legacy-slot-cap"
    assert facts["live_update"] is True and facts["base_url"] == "http://127.0.0.1:9100"


RULES = """\
version: 1
groups:
  - name: toy
    rules:
      - name: ToySlotsFull
        engine: toyserve
        expr: engine.known && load.queued > 0 && load.running >= double(engine.requests_ceiling)
        severity: critical
        summary: "every slot at its cap"
        fix:
          engine: toyserve
          add_flags: {"--slot-cap": "{{ engine.micro_batch_size * 4 }}"}
          set_live: {slot_cap: "{{ engine.micro_batch_size * 4 }}"}
"""


@pytest.mark.parametrize(("version", "flag"), [("1.0", "--legacy-slot-cap"), ("2.0", "--slot-cap")])
def test_a_rule_for_it_renders_its_fix(tmp_path: Path, version: str, flag: str) -> None:
    (tmp_path / "toy.rules.yaml").write_text(RULES, encoding="utf-8")
    cfg = parse_engine_cmdline(CMD.replace("--slot-cap", flag).split(), version=version)
    assert cfg is not None
    given = {"load": {"known": True, "running": 10.0, "queued": 6.0}, "engine": engine_facts(cfg)}
    facts = facts_from_mapping(given, partial=True, argv=cfg.argv)
    (rec,) = evaluate(load_rules([tmp_path]), facts)
    assert rec.rule == "ToySlotsFull" and rec.rendered is not None
    assert rec.rendered.valid, rec.rendered.problems
    assert f"{flag} 8" in rec.rendered.command and f"{flag} 2" not in rec.rendered.command
    assert rec.rendered.live is not None
    assert rec.rendered.live.startswith("curl -s -X POST http://127.0.0.1:9100/settings")


def test_a_flag_its_release_lacks_is_not_rendered_valid() -> None:
    cfg = parse_engine_cmdline(CMD.split(), version="2.0")
    assert cfg is not None
    fix = Fix(engine="toyserve", add_flags=(("--no-such-flag", "1"),))
    rendered = render_fix(cfg.argv, fix, target_of(engine_facts(cfg)))
    assert not rendered.valid
    assert any("has no flag --no-such-flag" in p for p in rendered.problems)
