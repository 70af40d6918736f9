"""docs/architecture.md matches the tree: each package on its floor, each path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bubblewatch"
DOC = ROOT / "docs" / "architecture.md"

# Written by the engines work (one package per serving engine) that lands beside this
# document; each entry leaves when its file exists (the last test fails until then).
PENDING: set[str] = set()  # paths the doc may name before they exist

# A file or folder in backticks: from the repository's top, or inside the package.
_PATH = re.compile(r"`([\w./-]+\.(?:py|md|yaml)|[\w./-]+/)`")
_LINK = re.compile(r"\]\(([\w.-]+\.md)(?:#[\w-]+)?\)")


def _named(text: str) -> set[str]:
    """Paths the document names: files and folders in backticks, links to other docs."""
    return set(_PATH.findall(text)) | {f"docs/{m}" for m in _LINK.findall(text)}


def test_every_path_it_names_exists() -> None:
    named = _named(DOC.read_text(encoding="utf-8"))
    assert len(named) > 10  # the pattern reads the document
    missing = [p for p in named - PENDING if not any((r / p).exists() for r in (ROOT, PACKAGE))]
    assert sorted(missing) == []


def test_every_package_and_root_module_is_placed() -> None:
    text = DOC.read_text(encoding="utf-8")
    packages = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()]
    modules = [p.name for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")]
    assert "detect" in packages and "errors.py" in modules
    missing = [f"bubblewatch/{p}/" for p in packages if f"`bubblewatch/{p}/`" not in text]
    missing += [m for m in modules if f"`{m}`" not in text]
    assert missing == []


def test_pending_paths_are_still_missing() -> None:
    """Once a pending file is in the repository it leaves PENDING and is checked like the rest."""
    assert sorted(p for p in PENDING if (ROOT / p).exists()) == []


def test_a_missing_path_is_seen() -> None:
    assert _named("see `bubblewatch/nowhere.py` and [x](nowhere.md)") == {
        "bubblewatch/nowhere.py",
        "docs/nowhere.md",
    }
