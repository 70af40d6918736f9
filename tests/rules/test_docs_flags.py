"""docs/rules.md and the runbooks name no engine flag the stated versions reject."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bubblewatch.cli.main import build_parser
from bubblewatch.engines.flagtable import table_for, tabulated_versions

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("docs/rules.md", "docs/runbooks.md")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*[a-z0-9])")
_VERSION = re.compile(r"\b0\.\d+\.\d+(?:\.post\d+)?\b")


def _bubblewatch_flags() -> set[str]:
    out: set[str] = set()
    parser = build_parser()
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            out.update(s for s in action.option_strings if s.startswith("--"))
            for sub in getattr(action, "choices", None) or {}:
                if isinstance(action.choices, dict):
                    stack.append(action.choices[sub])
    return out


# Commands of other tools the runbooks quote: their flags are not the engines'.
_OTHER_TOOLS = (
    "nvidia-smi",
    "py-spy",
    "curl",
    "promtool",
    "systemctl",
    "kubectl",
    "journalctl",
    "llama-server",  # llama.cpp's flags (docs/rules.md, LlamaCppLayerSplitSerialized)
    ".venv/bin/python benchmarks/",  # the benchmark scripts' own options
)


def _other_tool(text: str, at: int) -> bool:
    """True when the flag at `at` belongs to another tool's command in the same code span."""
    start = text.rfind("`", 0, at)
    span = text[start + 1 : at] if start >= 0 else ""
    return "\n\n" not in span and span.lstrip().startswith(_OTHER_TOOLS)


def _serving_part(text: str) -> str:
    """The text without its training sections (the training rules, the training alert's
    runbook): those flags are the training frameworks' (Megatron-LM, torchtitan), which
    have no flag tables here; the versions they were read from are in docs/training.md."""
    text = re.sub(r"(?ms)^### Training rules.*?(?=^## )", "", text)
    return re.sub(r"(?ms)^## BubblewatchBubbleAboveSchedule.*?(?=^## )", "", text)


@pytest.mark.parametrize("doc", DOCS)
def test_engine_flags_in_docs_are_accepted_where_the_doc_says(doc: str) -> None:
    text = _serving_part((ROOT / doc).read_text(encoding="utf-8"))
    own = _bubblewatch_flags()
    newest = [table_for("sglang", tabulated_versions("sglang")[-1]), table_for("vllm", "0.33.0")]
    problems = []
    for m in _FLAG.finditer(text):
        flag = m.group(1)
        if flag in own or any(t is not None and t.accepts(flag) for t in newest):
            continue
        if _other_tool(text, m.start()):
            continue
        # An older spelling: some release must accept it, and the doc must say which.
        near = text[max(0, m.start() - 300) : m.end() + 300]
        stated = _VERSION.findall(near)
        ok = any(
            (t := table_for(engine, v)) is not None and t.accepts(flag)
            for engine in ("sglang", "vllm")
            for v in stated
        )
        if not ok:
            problems.append(f"{doc}: {flag} (versions stated nearby: {stated or 'none'})")
    assert not problems, problems


def test_other_tools_flags_are_not_taken_for_the_engines() -> None:
    text = "run `nvidia-smi --query-compute-apps=pid` then `--pp-size 2`"
    assert _other_tool(text, text.index("--query"))
    assert not _other_tool(text, text.index("--pp-size"))


def test_the_check_catches_a_rejected_flag() -> None:
    """The depth flag does not exist in 0.5.6.post2; a doc recommending it there fails."""
    t = table_for("sglang", "0.5.6.post2")
    assert t is not None and not t.accepts("--pp-async-batch-depth")
    assert not table_for("sglang", "0.5.23").accepts("--cuda-graph-max-bs")
    assert table_for("sglang", "0.5.13").accepts("--cuda-graph-max-bs")
