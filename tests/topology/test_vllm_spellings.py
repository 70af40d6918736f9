"""Every spelling of vLLM's optimisation level and compilation config, per release table.

Regression (issue 18): -O/-cc/--optimization-level skipped the version check, so
`--optimization-level 0` on 0.8.5 reported no problem though the flag first
appears in 0.12.0.
"""

from __future__ import annotations

import pytest

from bubblewatch.engines.flagtable import table_for
from bubblewatch.rules.render import Fix, Target, render_fix
from bubblewatch.topology.cmdline import parse_engine_cmdline

CC = '{"cudagraph_mode": "NONE"}'

# (spelling, releases whose parser takes it, releases that refuse it)
CASES = [
    (["--optimization-level", "0"], ("0.12.0", "0.19.1", "0.33.0"), ("0.8.5", "0.9.2", "0.11.0")),
    (["--optimization-level=0"], ("0.12.0", "0.33.0"), ("0.8.5", "0.10.2")),
    (["--optimization_level=0"], ("0.12.0", "0.33.0"), ("0.8.5",)),
    # -O as a compilation-config flag up to 0.11, rewritten to --optimization-level from 0.12.
    (["-O3"], ("0.8.5", "0.11.0", "0.12.0", "0.33.0"), ()),
    (["-O", "3"], ("0.8.5", "0.11.0", "0.12.0", "0.33.0"), ()),
    (["-O=0"], ("0.8.5", "0.12.0", "0.33.0"), ()),
    # -O with JSON: only while -O is a flag (0.12+ keeps `-O` and has no such flag).
    (["-O", CC], ("0.10.2", "0.11.0"), ("0.12.0", "0.23.0", "0.33.0")),
    (["-O", '{"level": 3}'], ("0.8.5", "0.11.0"), ("0.12.0", "0.33.0")),
    # Dotted -O: -cc.key in 0.12 (deprecated), no level from 0.15.1; no dotted syntax in 0.8.5.
    (["-O.cudagraph_mode=NONE"], ("0.10.2", "0.12.0"), ("0.8.5", "0.15.1", "0.33.0")),
    (["-O.level=3"], ("0.9.2", "0.11.0", "0.12.0"), ("0.8.5", "0.33.0")),
    (["-cc", CC], ("0.12.0", "0.28.0", "0.33.0"), ("0.8.5", "0.11.0")),
    (["-cc.cudagraph_mode=NONE"], ("0.12.0", "0.33.0"), ("0.8.5", "0.11.0")),
    (["-cc.level=3"], ("0.12.0",), ("0.9.2", "0.11.0")),
    # cudagraph_mode first appears in 0.10.2's CompilationConfig (0.9.2 has none).
    (["--compilation-config", CC], ("0.10.2", "0.12.0", "0.33.0"), ("0.8.5", "0.9.2")),
    (["--compilation-config", '{"level": 3}'], ("0.8.5", "0.12.0", "0.33.0"), ()),
    (["--compilation-config.cudagraph_mode=NONE"], ("0.10.2", "0.33.0"), ("0.8.5", "0.9.2")),
    (["--compilation-config.level=3"], ("0.9.2", "0.33.0"), ("0.8.5",)),
    (["--enforce-eager"], ("0.8.5", "0.12.0", "0.33.0"), ()),
]


def _problems(args: list[str], version: str) -> tuple[str, ...]:
    cfg = parse_engine_cmdline(["vllm", "serve", "m", "-pp", "2", *args], {}, version=version)
    assert cfg is not None
    return cfg.problems


@pytest.mark.parametrize(("args", "takes", "refuses"), CASES, ids=str)
def test_each_spelling_is_checked_against_its_release(
    args: list[str], takes: tuple[str, ...], refuses: tuple[str, ...]
) -> None:
    for version in (*takes, *refuses):
        assert table_for("vllm", version) is not None
    for version in takes:
        assert _problems(args, version) == (), (args, version)
    for version in refuses:
        problems = _problems(args, version)
        assert problems and all(f"vllm {version}" in p for p in problems), (args, version)


def test_optimization_level_on_085_is_reported() -> None:
    (problem,) = _problems(["--optimization-level", "0"], "0.8.5")
    assert problem == "vllm 0.8.5 has no flag --optimization-level"


def test_dotted_o_problem_names_the_replacement() -> None:
    (problem,) = _problems(["-O.cudagraph_mode=NONE"], "0.33.0")
    assert "use -cc.cudagraph_mode" in problem


def test_unknown_version_reports_nothing() -> None:
    cfg = parse_engine_cmdline(["vllm", "serve", "m", "--optimization-level", "0"], {})
    assert cfg is not None and cfg.problems == ()


_GRAPHS_ON = Fix(
    "vllm",
    (),
    (
        "--enforce-eager",
        "-O=0",
        "--optimization-level=0",
        "-cc.cudagraph_mode=none",
        "-O.cudagraph_mode=none",
        "--compilation-config.cudagraph_mode=none",
    ),
)


@pytest.mark.parametrize("version", ["0.8.5", "0.10.2", "0.12.0", "0.19.1", "0.33.0"])
@pytest.mark.parametrize(
    "args",
    [
        ["-O", "0"],
        ["-O0"],
        ["-O=0"],
        ["--optimization-level", "0"],
        ["--optimization_level=0"],
        ["-cc.cudagraph_mode=NONE"],
        ["--compilation-config.cudagraph_mode=NONE"],
        ["--enforce-eager"],
    ],
    ids=str,
)
def test_graphs_fix_renders_a_command_the_release_takes(args: list[str], version: str) -> None:
    """The fix drops the graphs-off spelling; what it renders is judged by the release."""
    argv = ["vllm", "serve", "m", "-pp", "2", *args]
    out = render_fix(argv, _GRAPHS_ON, Target(engine="vllm", table=table_for("vllm", version)))
    assert out.argv == ("vllm", "serve", "m", "-pp", "2")
    assert out.valid and out.problems == ()


def test_kept_compilation_config_the_release_lacks_is_a_problem() -> None:
    argv = ["vllm", "serve", "m", "-cc", CC, "--enforce-eager"]
    out = render_fix(argv, _GRAPHS_ON, Target(engine="vllm", table=table_for("vllm", "0.8.5")))
    assert "vllm 0.8.5 has no flag -cc" in out.problems and not out.valid
    same = render_fix(argv, _GRAPHS_ON, Target(engine="vllm", table=table_for("vllm", "0.12.0")))
    assert same.valid
