"""A status line on stderr for work that takes more than a moment (many files, many queries).

Shown only when stderr is a terminal and the output is not `--json`, so piped
and machine-read output stays clean. The line is rewritten in place at most
a few times a second and ended with a newline by `done`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from bubblewatch.errors import InputError

if TYPE_CHECKING:
    from bubblewatch.sources.prometheus_history.fetch import FetchLimits


class Progress:
    """`progress("text")` rewrites the status line; `done()` ends it."""

    def __init__(
        self,
        enabled: bool,
        *,
        stream: TextIO | None = None,
        min_interval_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self._stream = stream if stream is not None else sys.stderr
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._last = -float("inf")
        self._shown = False

    @classmethod
    def for_args(cls, args: argparse.Namespace) -> Progress:
        """On only for a terminal's stderr, and never with --json."""
        return cls(sys.stderr.isatty() and not getattr(args, "json", False))

    def __call__(self, text: str, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = self._clock()
        if not force and now - self._last < self._min_interval_s:
            return
        self._last = now
        self._stream.write(f"\r\x1b[K{text}")
        self._stream.flush()
        self._shown = True

    def done(self, text: str | None = None) -> None:
        """Show `text` (if any) as the final state and end the line."""
        if not self.enabled:
            return
        if text is not None:
            self(text, force=True)
        if self._shown:
            self._stream.write("\n")
            self._stream.flush()
            self._shown = False


def query_progress(progress: Progress, where: str) -> Callable[[int, int], None]:
    """An `on_progress(done, planned)` for Prometheus loads that writes to `progress`."""

    def show(done: int, planned: int) -> None:
        progress(f"querying {where}: {done}/{planned} range queries", force=done in (0, planned))

    return show


def fetch_limits(concurrency: int) -> FetchLimits:
    """The default limits with `--concurrency`; InputError for a bad value."""
    from bubblewatch.sources.prometheus_history.fetch import FetchLimits

    if concurrency < 1:
        raise InputError(f"must be >= 1, got {concurrency}", path="--concurrency")
    return FetchLimits(concurrency=concurrency)
