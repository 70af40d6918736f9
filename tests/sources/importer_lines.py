"""The importers fed lines instead of files: (line number, text, ended) tuples, no I/O.

A test writes a capture inline and has it parsed the way a reader parses a
file's lines, ending the last one or not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from bubblewatch.model.recording import Recording
from bubblewatch.sources.importers._common import TextBlock
from bubblewatch.sources.importers._pieces import BlockParser, _check_gpus
from bubblewatch.sources.importers.csv_table import _parse
from bubblewatch.sources.importers.dcgmi import _Parser as DcgmiParser
from bubblewatch.sources.importers.import_options import ImportOptions
from bubblewatch.sources.importers.nvidia_smi import _Parser as SmiParser

Lines = Iterable[tuple[int, str, bool]]
Options = ImportOptions | None


def text_blocks(lines: Lines, size: int = 8192) -> Iterator[TextBlock]:
    """(line number, text, ended) lines as blocks of consecutive numbers (the parsers' input)."""
    block: list[str] = []
    first = 0
    for lineno, text, ended in lines:
        if block and (lineno != first + len(block) or len(block) >= size):
            yield TextBlock(first, block)
            block = []
        if not block:
            first = lineno
        if not ended:
            if block:
                yield TextBlock(first, block)
            yield TextBlock(lineno, [text], last_ended=False)
            block = []
            continue
        block.append(text)
    if block:
        yield TextBlock(first, block)


def parse_lines(parser: BlockParser, lines: Lines) -> Recording:
    """(line number, text, ended) lines through `parser`, as one Recording; no I/O."""
    for block in text_blocks(lines):
        parser.block(block)
        _check_gpus(parser.builder, "<input>", block.first_line + len(block.lines) - 1)
    rec = parser.finish()
    _check_gpus(parser.builder, "<input>", None)
    return rec


def parse_nvidia_smi(lines: Lines, *, path: str = "<input>", options: Options = None) -> Recording:
    """nvidia-smi CSV output."""
    return parse_lines(SmiParser(path, options or ImportOptions()), lines)


def parse_dcgmi(lines: Lines, *, path: str = "<input>", options: Options = None) -> Recording:
    """`dcgmi dmon` output."""
    return parse_lines(DcgmiParser(path, options or ImportOptions()), lines)


def parse_csv_table(lines: Lines, *, path: str = "<input>", options: Options = None) -> Recording:
    """A telemetry CSV (any logger's column names)."""
    return _parse(text_blocks(lines), path=path, options=options)
