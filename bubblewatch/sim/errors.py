"""The simulator's input error: a scenario that cannot be simulated as written."""

from __future__ import annotations

from bubblewatch.errors import InputError


class ScenarioError(InputError):
    """A bad scenario file or override: names the file, line and field, and what was expected."""
