"""What a GPU model's name tells: its default power limit and what its power reading averages.

A DCGM or nvidia-smi capture often has `name`/`gpu_model` and no
`power.limit`. Without a reference, power can only be scaled to the window's
own maximum, which makes an idle card at 120 W look busy. The figures are the
boards' default (maximum) power from NVIDIA's product specifications; an
operator's own cap may be lower, which a file that states its limit overrides.

NVML's power reading (`nvmlDeviceGetPowerUsage`; nvidia-smi `power.draw`, DCGM
`DCGM_FI_DEV_POWER_USAGE`) is, per NVML's API reference: "On Ampere (except
GA100) or newer GPUs, returns average power draw over 1 sec. On GA100 and older
architectures, instantaneous power is returned." So an A100, A30 or A800
(GA100), and a V100, T4, P100 or TITAN X, read an instant, not a 1 s mean. A name
this table does not know is taken for a 1 s average (Ampere and newer).

Patterns are tried in order, most specific first, against the lower-cased
name with "nvidia" and spaces removed.
"""

from __future__ import annotations

import re

POWER_READING_AVERAGE_S = 1.0  # Ampere (except GA100) and newer: the mean over the last 1 s
POWER_READING_INSTANT_S = 0.0  # GA100 and older architectures: an instant reading
_AVG, _INSTANT = POWER_READING_AVERAGE_S, POWER_READING_INSTANT_S

# (pattern on the squashed name, default power limit in W (None: not known),
#  what its power reading averages over in s); the comments name the architecture.
_MODELS: tuple[tuple[str, float | None, float], ...] = (
    (r"gb200", 1200.0, _AVG),  # Blackwell
    (r"b200", 1000.0, _AVG),
    (r"h200nvl", 600.0, _AVG),  # Hopper
    (r"h200", 700.0, _AVG),
    (r"h100nvl", 400.0, _AVG),
    (r"h100pcie", 350.0, _AVG),
    (r"h100", 700.0, _AVG),  # SXM5 (the DCGM name is "NVIDIA H100 80GB HBM3")
    (r"h800pcie", 350.0, _AVG),
    (r"h800", 700.0, _AVG),
    (r"a100.*pcie.*40gb|a100-pcie-40gb", 250.0, _INSTANT),  # GA100
    (r"a100.*pcie", 300.0, _INSTANT),
    (r"a100", 400.0, _INSTANT),  # SXM4
    (r"a800.*pcie", 300.0, _INSTANT),
    (r"a800", 400.0, _INSTANT),
    (r"a30\b|a30$", 165.0, _INSTANT),
    (r"l40s", 350.0, _AVG),  # Ada
    (r"l40", 300.0, _AVG),
    (r"l4\b|l4$", 72.0, _AVG),
    (r"a40", 300.0, _AVG),  # GA102
    (r"a10\b|a10$", 150.0, _AVG),  # GA102
    (r"t4\b|t4$", 70.0, _INSTANT),  # Turing
    (r"v100.*pcie", 250.0, _INSTANT),  # Volta
    (r"v100", 300.0, _INSTANT),
    (r"p100", None, _INSTANT),  # Pascal
    (r"p40\b|p40$", 250.0, _INSTANT),
    (r"rtxpro6000blackwellserver", 600.0, _AVG),
    (r"rtxpro6000blackwell", 600.0, _AVG),
    (r"rtx6000ada", 300.0, _AVG),
    (r"rtxa6000", 300.0, _AVG),  # GA102
    (r"geforcertx4090|rtx4090", 450.0, _AVG),
    (r"geforcertx3090|rtx3090", 350.0, _AVG),
    (r"titanx", 250.0, _INSTANT),  # Maxwell, Pascal
)
_SQUASH = re.compile(r"[\s_]+")

# Names as NVML (nvidia-smi `name`, DCGM `modelName`) spells them, one per family, for
# messages that list what this table knows.
EXAMPLE_NAMES = (
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H200",
    "NVIDIA B200",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA A100-PCIE-40GB",
    "NVIDIA A30",
    "NVIDIA L40S",
    "NVIDIA L4",
    "NVIDIA A10",
    "Tesla V100-SXM2-32GB",
    "Tesla T4",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
)


def _model(name: str) -> tuple[str, float | None, float] | None:
    squashed = _SQUASH.sub("", name.lower()).replace("nvidia", "")
    if not squashed:
        return None
    for row in _MODELS:
        if re.search(row[0], squashed):
            return row
    return None


def is_known(name: str) -> bool:
    """Whether this table knows the GPU model called `name`."""
    return _model(name) is not None


def same_model(a: str, b: str) -> bool:
    """Whether two names are one model as this table tells them apart (an unknown name
    is only the same as itself, spacing and case aside)."""
    row_a, row_b = _model(a), _model(b)
    if row_a is None or row_b is None:
        return _SQUASH.sub("", a.lower()) == _SQUASH.sub("", b.lower())
    return row_a is row_b


def known_power_limit_w(name: str) -> float | None:
    """The default power limit of the GPU model called `name`, or None if not known."""
    row = _model(name)
    return None if row is None else row[1]


def power_reading_average_s(name: str) -> float | None:
    """What the power reading of the GPU model called `name` averages over, in seconds:
    POWER_READING_AVERAGE_S (1 s), POWER_READING_INSTANT_S (0: an instant), None if not known."""
    row = _model(name)
    return None if row is None else row[2]


def power_average_s(name: str | None) -> float:
    """As power_reading_average_s, with an unknown model taken for a 1 s average."""
    known = power_reading_average_s(name) if name else None
    return POWER_READING_AVERAGE_S if known is None else known
