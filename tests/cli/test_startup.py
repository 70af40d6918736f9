"""Start-up: the CLI imports a subcommand's module only when that subcommand is chosen.

These hold the property itself, not a timing: `--version` and `--help` stay
within a few times an empty interpreter's start-up (BENCHMARKS.md) only while
they import nothing heavy.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bubblewatch
from bubblewatch.cli.main import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[2]
HEAVY = (
    "numpy",
    "scipy",
    "yaml",
    "celpy",
    "bubblewatch.detect",
    "bubblewatch.rules",
    "bubblewatch.daemon",
    "bubblewatch.model",
    "bubblewatch.topology",
    "bubblewatch.sinks",
)

# A fresh interpreter runs main(argv) and prints the modules it then holds.
CHILD = """
import contextlib, io, json, sys
from bubblewatch.cli.main import main
argv = json.loads(sys.argv[1])
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(argv)
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(*argv: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(argv)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return set(json.loads(out.stdout))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HEAVY))


@pytest.mark.parametrize("argv", [["--version"], ["--help"], []])
def test_version_and_help_import_no_analysis(argv: list[str]) -> None:
    modules = _modules_after(*argv)
    assert "bubblewatch.cli.main" in modules
    assert _heavy(modules) == []
    assert not any(
        m.startswith("bubblewatch.cli.") and m != "bubblewatch.cli.main" for m in modules
    )


def test_a_subcommand_imports_its_own_module_only() -> None:
    modules = _modules_after("scenarios", "--help")
    cli = {m for m in modules if m.startswith("bubblewatch.cli.")}
    assert cli == {"bubblewatch.cli.main", "bubblewatch.cli.simulate"}
    assert "bubblewatch.daemon" not in modules


def test_the_check_sees_a_heavy_import() -> None:
    """The check above is not blind: a subcommand that needs the daemon shows it."""
    assert "bubblewatch.daemon" in _heavy(_modules_after("run", "--help"))


def test_every_cli_module_is_in_the_table() -> None:
    """A new subcommand module is registered in main.COMMANDS, not found by a scan."""
    cli = ROOT / "bubblewatch" / "cli"
    modules = {p.stem for p in cli.glob("*.py") if not p.stem.startswith("_") and p.stem != "main"}
    assert {c.module.rsplit(".", 1)[1] for c in COMMANDS} == modules
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_lazy_help_is_the_complete_parsers_help(command: str) -> None:
    """What `bubblewatch CMD --help` prints is the help of the parser built whole."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert isinstance(sub.choices, dict)
    whole = sub.choices[command].format_help()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    assert out.getvalue() == whole
    assert sub.choices[command].get_default("func") is not None or command == "rules"


def test_python_m_bubblewatch_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bubblewatch", "--version"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert (out.returncode, out.stdout.strip()) == (0, bubblewatch.__version__)


def test_analyze_of_a_file_imports_only_what_it_uses() -> None:
    """No Prometheus client, discovery, training frameworks or daemon for a CSV."""
    csv = ROOT / "tests" / "fixtures" / "importers" / "nvidia_smi_units.csv"
    modules = _modules_after("analyze", str(csv))
    assert "bubblewatch.detect.diagnose" in modules  # it did analyse the file
    unused = (
        "prometheus_client",
        "bubblewatch.sources.prometheus_history",
        "bubblewatch.topology.discover",
        "bubblewatch.topology.training",
        "bubblewatch.daemon",
        "bubblewatch.sources.importers.dcgmi",  # another format's reader
    )
    assert [m for m in unused if m in modules] == []


def test_exit_codes_through_the_lazy_parser(capsys: pytest.CaptureFixture[str]) -> None:
    """No command: the help and 2; an unknown one or a bad option: argparse's 2."""
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out
    expected = {
        "bogus": "invalid choice: 'bogus'",
        "analyze": "unrecognized arguments: --no-such-option",
        "rules": "the following arguments are required: ACTION",
    }
    for argv in (["bogus"], ["analyze", "--no-such-option"], ["rules"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2, argv
        assert expected[argv[0]] in capsys.readouterr().err


# A fresh interpreter runs main(argv) (analyze, which multiplies matrices), then reports the
# BLAS variables it saw and how many threads the process holds.
BLAS_CHILD = """
import contextlib, io, json, os, sys
from bubblewatch.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(sys.argv[1:])
print(json.dumps({"env": os.environ.get("OPENBLAS_NUM_THREADS"),
                  "threads": len(os.listdir("/proc/self/task"))}))
"""


def _blas_child(env_value: str | None) -> dict[str, object]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    }
    if env_value is not None:
        env["OPENBLAS_NUM_THREADS"] = env_value
    csv = ROOT / "tests" / "fixtures" / "importers" / "nvidia_smi_units.csv"
    out = subprocess.run(
        [sys.executable, "-c", BLAS_CHILD, "analyze", str(csv), "--json"],
        capture_output=True, text=True, check=True, cwd=ROOT, env=env,
    )  # fmt: skip
    got: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def test_the_cli_asks_numpy_for_one_blas_thread() -> None:
    """OpenBLAS starts a spinning thread per core at numpy's import: the CLI asks for one."""
    own = _blas_child(None)
    theirs = _blas_child("2")  # the user's choice wins, and OpenBLAS starts a second thread
    assert (own["env"], theirs["env"]) == ("1", "2")
    assert int(str(own["threads"])) + 1 == int(str(theirs["threads"])), (own, theirs)
