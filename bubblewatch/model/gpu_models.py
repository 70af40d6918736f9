"""Default power limits of common GPU models, for files that name the card but not its limit.

A DCGM or nvidia-smi capture often has `name`/`gpu_model` and no
`power.limit`. Without a reference, power can only be scaled to the window's
own maximum, which makes an idle card at 120 W look busy. The figures are the
boards' default (maximum) power from NVIDIA's product specifications; an
operator's own cap may be lower, which a file that states its limit overrides.
Patterns are tried in order, most specific first, against the lower-cased
name with "nvidia" and spaces removed.
"""

from __future__ import annotations

import re

# (pattern on the squashed name, default power limit in W)
_LIMITS: tuple[tuple[str, float], ...] = (
    (r"gb200", 1200.0),
    (r"b200", 1000.0),
    (r"h200nvl", 600.0),
    (r"h200", 700.0),
    (r"h100nvl", 400.0),
    (r"h100pcie", 350.0),
    (r"h100", 700.0),  # SXM5 (the DCGM name is "NVIDIA H100 80GB HBM3")
    (r"h800pcie", 350.0),
    (r"h800", 700.0),
    (r"a100.*pcie.*40gb|a100-pcie-40gb", 250.0),
    (r"a100.*pcie", 300.0),
    (r"a100", 400.0),  # SXM4
    (r"a800.*pcie", 300.0),
    (r"a800", 400.0),
    (r"l40s", 350.0),
    (r"l40", 300.0),
    (r"l4\b|l4$", 72.0),
    (r"a40", 300.0),
    (r"a10\b|a10$", 150.0),
    (r"t4\b|t4$", 70.0),
    (r"v100.*pcie", 250.0),
    (r"v100", 300.0),
    (r"rtxpro6000blackwellserver", 600.0),
    (r"rtxpro6000blackwell", 600.0),
    (r"rtx6000ada", 300.0),
    (r"rtxa6000", 300.0),
    (r"geforcertx4090|rtx4090", 450.0),
    (r"geforcertx3090|rtx3090", 350.0),
    (r"titanx", 250.0),
)
_SQUASH = re.compile(r"[\s_]+")


def known_power_limit_w(name: str) -> float | None:
    """The default power limit of the GPU model called `name`, or None if not known."""
    squashed = _SQUASH.sub("", name.lower()).replace("nvidia", "")
    if not squashed:
        return None
    for pattern, limit in _LIMITS:
        if re.search(pattern, squashed):
            return limit
    return None
