"""Scenario loading: every built-in is valid; bad files fail with file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubblewatch.sim import ScenarioError, list_scenarios, load_scenario
from bubblewatch.sim.scenario import apply_overrides, builtin_dir

REQUIRED = {
    "pp8-serialized",
    "pp8-async",
    "pp8-graphs-off",
    "pp8-single-request",
    "tp8",
    "idle",
    "pp4-imbalanced",
    "pp4-throttled",
    "pp4x2",
    "pp2-async",
    "pp16-serialized",
    "dp8",
}


def test_builtins_listed_with_descriptions() -> None:
    items = dict(list_scenarios())
    assert set(items) >= REQUIRED
    assert all(d and "\n" not in d for d in items.values())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_builtin_loads_and_names_itself(name: str) -> None:
    sc = load_scenario(name)
    assert sc.name == name
    assert sc.engine_argv and not any("api-key" in a for a in sc.engine_argv)
    assert sum(sc.stage_layers) == sc.model.layers


def test_seed_scenario_matches_the_story() -> None:
    sc = load_scenario("pp8-serialized")
    assert sc.parallel.pp_size == 8 and sc.parallel.pp_async_batch_depth == 0
    assert not sc.parallel.cuda_graph and "--disable-cuda-graph" in sc.engine_argv
    assert sc.hardware.gpu.power_limit_w == 600 and sc.hardware.gpu.idle_power_w == 85
    assert sc.hardware.interconnect.kind == "pcie"
    assert sc.model.layers == 61 and sc.model.moe is not None
    assert sc.workload.concurrency == 8
    # SGLang's default micro-batch cap and the serialized in-flight rule.
    assert sc.parallel.micro_batch_cap == 128 // 8
    assert sc.parallel.slots("sglang") == 8
    assert load_scenario("pp8-async").parallel.slots("sglang") == 16
    assert load_scenario("pp8-async").parallel.micro_batch_cap == 1


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    return p


def _seed_text() -> str:
    return (builtin_dir() / "pp8-serialized.yaml").read_text()


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_unknown_key_is_an_error_with_line(tmp_path: Path) -> None:
    text = _seed_text().replace("  pp_size: 8\n", "  pp_size: 8\n  pp_szie: 4\n")
    p = _write(tmp_path, text)
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "parallel.pp_szie"
    assert e.value.line == _line_of(text, "pp_szie")
    assert str(p) in str(e.value) and "unknown key" in str(e.value)


def test_wrong_type_names_field_and_expectation(tmp_path: Path) -> None:
    text = _seed_text().replace("  concurrency: 8", "  concurrency: eight")
    p = _write(tmp_path, text)
    with pytest.raises(ScenarioError, match=r"must be an integer, got 'eight'") as e:
        load_scenario(p)
    assert e.value.field == "workload.concurrency"
    assert e.value.line == _line_of(text, "concurrency: eight")


def test_missing_required_field(tmp_path: Path) -> None:
    text = _seed_text().replace("  hidden_size: 7168\n", "")
    with pytest.raises(ScenarioError, match="required field is missing") as e:
        load_scenario(_write(tmp_path, text))
    assert e.value.field == "model.hidden_size"


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        (
            "  cuda_graph: false\n",
            "  cuda_graph: false\n  layer_partition: [8, 8, 8, 8, 8, 8, 8, 8]\n",
            "parallel.layer_partition",
            "must sum to model.layers=61",
        ),
        (
            "    memory_efficiency_ratio: 0.9",
            "    memory_efficiency_ratio: 1.5",
            "hardware.gpu.memory_efficiency_ratio",
            "ratio between 0 and 1",
        ),
        (
            "    kind: pcie",
            "    kind: infiniband",
            "hardware.interconnect.kind",
            "one of pcie, nvlink",
        ),
        ("  cuda_graph: false\n", "  cuda_graph: 'no'\n", "parallel.cuda_graph", "true or false"),
        ('--port, "30000"]', "--api-key, sk-123]", "engine_argv[9]", "secrets"),
        (
            "    spin_power_w: 150",
            "    spin_power_w: 50",
            "hardware.gpu.spin_power_w",
            "idle_power_w <=",
        ),
        (
            "  chunk_size: 8192\n",
            "  chunk_size: 8192\nfaults:\n  - {gpu: 9, kind: thermal, clock_ratio: 0.5}\n",
            "faults[0].gpu",
            "below 8",
        ),
        (
            "  chunk_size: 8192\n",
            "  chunk_size: 8192\nfaults:\n  - {gpu: 1, kind: melt, clock_ratio: 0.5}\n",
            "faults[0].kind",
            "power_cap, thermal, hw_slowdown",
        ),
    ],
)
def test_invalid_values(tmp_path: Path, old: str, new: str, field: str, message: str) -> None:
    text = _seed_text()
    assert old in text
    with pytest.raises(ScenarioError, match=message) as e:
        load_scenario(_write(tmp_path, text.replace(old, new)))
    assert e.value.field == field
    assert e.value.line is not None
    assert "sk-123" not in str(e.value)  # a secret is never echoed back


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    text = "name: x\ndescription: a: b\n"
    with pytest.raises(ScenarioError, match="not valid YAML") as e:
        load_scenario(_write(tmp_path, text))
    assert e.value.line == 2


def test_duplicate_key(tmp_path: Path) -> None:
    text = _seed_text().replace("  pp_size: 8\n", "  pp_size: 8\n  pp_size: 4\n")
    with pytest.raises(ScenarioError, match="duplicate key") as e:
        load_scenario(_write(tmp_path, text))
    assert e.value.field == "parallel.pp_size"


def test_unknown_builtin_lists_known() -> None:
    with pytest.raises(ScenarioError, match="pp8-serialized"):
        load_scenario("pp9-nonsense")


def test_overrides_revalidate_and_rewrite_argv() -> None:
    sc = load_scenario("pp8-serialized")
    fixed = apply_overrides(sc, {"parallel.pp_async_batch_depth": 8, "parallel.cuda_graph": True})
    assert fixed.parallel.pp_async_batch_depth == 8 and fixed.parallel.cuda_graph
    assert "--disable-cuda-graph" not in fixed.engine_argv
    i = fixed.engine_argv.index("--pp-async-batch-depth")
    assert fixed.engine_argv[i + 1] == "8"
    assert sc.parallel.pp_async_batch_depth == 0  # the original is untouched
    with pytest.raises(ScenarioError, match="must be an integer >= 1") as e:
        apply_overrides(sc, {"parallel.pp_size": 0})
    assert e.value.field == "parallel.pp_size"
    with pytest.raises(ScenarioError, match="unknown key"):
        apply_overrides(sc, {"workload.concurency": 2})
    faulty = apply_overrides(sc, {"faults": [{"gpu": 1, "kind": "thermal", "clock_ratio": 0.5}]})
    assert faulty.faults[0].reason_bits == 0x20
