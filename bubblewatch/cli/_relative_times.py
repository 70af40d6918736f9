"""Let `--start -1h` through argparse: a relative time is a value, not an unknown option.

argparse takes any argument starting with `-` for an option unless it looks
like a negative number, so `--start -1h` failed ("expected one argument") and
only `--start=-1h` worked. The parser's own negative-number test is widened
to relative times (`-1h`, `-30m`, `-1.5d`), the form the Prometheus flags take.
"""

from __future__ import annotations

import argparse
import re

# argparse's own pattern (`-5`, `-.5`), and a number with a unit of time after it.
_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$|^-\d+(?:\.\d+)?(?:ms|s|m|h|d|w)$")


def accept_relative_times(parser: argparse.ArgumentParser) -> None:
    """Make `parser` read `-1h` after a flag as its value (it has no options like `-1h`)."""
    parser._negative_number_matcher = _NEGATIVE  # argparse has no public hook
