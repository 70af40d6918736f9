"""What a CSV column holds, recognised from its header: the common spellings of telemetry fields.

A header cell is normalised before lookup: lower case, a unit in brackets or
parentheses split off (`power.draw [W]`, `Power (mW)`), separators (space, `.`,
`-`, `/`, `:`) turned into `_`. The name then maps to a role (time, GPU index,
uuid, model name, host, power limit) or a metric with the scale that turns the
column's unit into the metric's (percent to ratio, mW to W, MiB to bytes,
mJ to J). A name that ends in a unit (`power_mw`, `energy_mj`, `util_pct`) or
a bracketed unit overrides the default unit of the name.

Wide layouts name the GPU in the header (`gpu0_power_w`, `power.draw [W] gpu 1`,
`GPU 2 Power (W)`, `sm_active_3`): `split_gpu` takes the index off.

Columns nobody recognises are kept as annotations (see csv_table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bubblewatch.model.metrics import Metric

# Roles that are not metrics.
TIME, GPU, UUID, NAME, HOST, POWER_LIMIT = "time", "gpu", "uuid", "name", "host", "power_limit"
ROLES = (TIME, GPU, UUID, NAME, HOST, POWER_LIMIT)

MIB = 1024.0 * 1024.0


@dataclass(frozen=True)
class ColumnKind:
    """A recognised column: a role or a metric, and the scale into the metric's unit.

    `scale` None means "percent, unless the values are fractions": a
    utilisation column whose values all lie in [0, 1.05] with some not whole
    numbers is a ratio. (DCGM's profiling fields, SM activity and the like,
    are ratios unless the name or unit says percent.)
    """

    role: str  # one of ROLES or "metric"
    metric: Metric | None = None
    scale: float | None = 1.0
    priority: int = 0  # when two columns give one metric, the lower number wins


def _m(metric: Metric, scale: float | None = 1.0, priority: int = 0) -> ColumnKind:
    return ColumnKind("metric", metric, scale, priority)


_PCT = 0.01
_AUTO = None

# Normalised names (see `normalise`). DCGM field names are listed without their
# `dcgm_fi_` prefix, which `normalise` strips.
ALIASES: dict[str, ColumnKind] = {
    **dict.fromkeys(
        (
            "timestamp",
            "time",
            "ts",
            "datetime",
            "date_time",
            "time_s",
            "timestamp_s",
            "epoch",
            "epoch_s",
            "unix_time",
            "time_stamp",
            "sample_time",
        ),
        ColumnKind(TIME),
    ),
    **dict.fromkeys(
        (
            "gpu",
            "index",
            "gpu_index",
            "gpu_id",
            "gpu_idx",
            "gpu_num",
            "device",
            "device_id",
            "device_index",
            "entity",
            "entity_id",
            "entityid",
            "minor_number",
            "gpu_minor_number",
            "rank",
            "local_rank",
        ),
        ColumnKind(GPU),
    ),
    **dict.fromkeys(("uuid", "gpu_uuid", "device_uuid"), ColumnKind(UUID)),
    **dict.fromkeys(
        ("name", "gpu_name", "gpu_model", "model", "model_name", "modelname", "product_name"),
        ColumnKind(NAME),
    ),
    **dict.fromkeys(("host", "hostname", "node", "node_name", "instance"), ColumnKind(HOST)),
    **dict.fromkeys(
        (
            "power_limit",
            "power_limit_w",
            "enforced_power_limit",
            "power_management_limit",
            "dev_power_mgmt_limit",
            "dev_enforced_power_limit",
        ),
        ColumnKind(POWER_LIMIT),
    ),
    # Power: NVML's reading (1 s average on Ampere except GA100 and newer, an instant on
    # GA100 and older: the detector tells by the GPU name), unless it says instant.
    **dict.fromkeys(
        (
            "power",
            "power_w",
            "power_watts",
            "watts",
            "power_draw",
            "power_draw_w",
            "power_draw_average",
            "power_usage",
            "power_usage_w",
            "powerdraw",
            "gpu_power",
            "gpu_power_w",
            "board_power",
            "socket_power",
            "dev_power_usage",
            "pwr",
        ),
        _m(Metric.POWER_AVG_W),
    ),
    **dict.fromkeys(
        (
            "power_instant",
            "power_instant_w",
            "power_draw_instant",
            "instant_power",
            "dev_power_usage_instant",
            "powinst",
        ),
        _m(Metric.POWER_INSTANT_W),
    ),
    # utilization.gpu: a kernel ran during the driver's sample period. nvidia-smi dmon
    # calls it "sm", many loggers "sm_util": it is not SM activity.
    **dict.fromkeys(
        (
            "util",
            "utilization",
            "gpu_util",
            "gpu_utilization",
            "util_gpu",
            "utilization_gpu",
            "gpu_busy",
            "sm_util",
            "sm_utilization",
            "sm",
            "dev_gpu_util",
            "gputl",
            "gfx_activity",
            "gpu_use",
        ),
        _m(Metric.KERNEL_BUSY_RATIO, _AUTO),
    ),
    **dict.fromkeys(
        ("gr_engine_active", "prof_gr_engine_active", "gract", "graphics_active"),
        _m(Metric.KERNEL_BUSY_RATIO, _AUTO, priority=1),
    ),
    **dict.fromkeys(
        ("sm_active", "sm_activity", "prof_sm_active", "smact", "sm_active_ratio"),
        _m(Metric.SM_ACTIVE_RATIO),
    ),
    **dict.fromkeys(
        ("sm_occupancy", "prof_sm_occupancy", "smocc", "sm_occupancy_ratio"),
        _m(Metric.SM_OCCUPANCY_RATIO),
    ),
    **dict.fromkeys(
        (
            "tensor_active",
            "tensor_activity",
            "prof_pipe_tensor_active",
            "tenso",
            "tensor_util",
            "tensor_active_ratio",
        ),
        _m(Metric.TENSOR_ACTIVE_RATIO),
    ),
    **dict.fromkeys(
        (
            "sm_clock",
            "sm_clock_mhz",
            "clock_sm",
            "clock_sm_mhz",
            "clocks_sm",
            "clocks_current_sm",
            "dev_sm_clock",
            "smclk",
        ),
        _m(Metric.SM_CLOCK_MHZ),
    ),
    **dict.fromkeys(
        (
            "temp",
            "temp_c",
            "temperature",
            "temperature_c",
            "temperature_gpu",
            "gpu_temp",
            "gpu_temp_c",
            "dev_gpu_temp",
            "tmptr",
        ),
        _m(Metric.TEMPERATURE_C),
    ),
    **dict.fromkeys(
        (
            "throttle_reasons",
            "clocks_event_reasons",
            "clock_event_reasons",
            "clocks_event_reasons_active",
            "clocks_throttle_reasons_active",
            "clock_throttle_reasons",
            "dev_clock_throttle_reasons",
            "dev_clocks_event_reasons",
            "dvcctr",
        ),
        _m(Metric.CLOCKS_EVENT_REASONS),
    ),
    **dict.fromkeys(
        ("energy", "energy_j", "total_energy", "energy_joules"),
        _m(Metric.ENERGY_J),
    ),
    **dict.fromkeys(
        ("total_energy_consumption", "dev_total_energy_consumption", "totec"),
        _m(Metric.ENERGY_J, 1e-3),
    ),
    **dict.fromkeys(
        (
            "pcie_tx",
            "pcie_tx_bytes",
            "pcie_tx_bytes_s",
            "pcie_tx_bytes_per_s",
            "prof_pcie_tx_bytes",
            "pcitx",
        ),
        _m(Metric.PCIE_TX_BYTES_PER_S),
    ),
    **dict.fromkeys(
        (
            "pcie_rx",
            "pcie_rx_bytes",
            "pcie_rx_bytes_s",
            "pcie_rx_bytes_per_s",
            "prof_pcie_rx_bytes",
            "pcirx",
        ),
        _m(Metric.PCIE_RX_BYTES_PER_S),
    ),
    **dict.fromkeys(
        ("mem_used", "memory_used", "fb_used", "dev_fb_used", "used_memory", "vram_used"),
        _m(Metric.MEMORY_USED_BYTES, MIB),
    ),
    **dict.fromkeys(("memory_used_bytes", "mem_used_bytes"), _m(Metric.MEMORY_USED_BYTES)),
}

# A unit at the end of a name, or in brackets: the scale from it to the metric's unit.
_UNIT_SCALES: dict[str, dict[Metric | None, float]] = {
    "w": {None: 1.0},
    "watts": {None: 1.0},
    "mw": {None: 1e-3},
    "pct": {None: _PCT},
    "percent": {None: _PCT},
    "percentage": {None: _PCT},
    "%": {None: _PCT},
    "ratio": {None: 1.0},
    "mhz": {None: 1.0},
    "ghz": {None: 1e3},
    "c": {None: 1.0},
    "j": {None: 1.0},
    "mj": {None: 1e-3},
    "kj": {None: 1e3},
    "b": {None: 1.0},
    "bytes": {None: 1.0},
    "b_s": {None: 1.0},
    "bytes_s": {None: 1.0},
    "kb": {None: 1e3},
    "kib": {None: 1024.0},
    "kb_s": {None: 1e3},
    "kib_s": {None: 1024.0},
    "mb": {None: 1e6, Metric.MEMORY_USED_BYTES: MIB},
    "mib": {None: MIB},
    "mb_s": {None: 1e6},
    "mib_s": {None: MIB},
    "gb": {None: 1e9, Metric.MEMORY_USED_BYTES: MIB * 1024.0},
    "gib": {None: MIB * 1024.0},
}
_UNITS_LONGEST_FIRST = sorted(_UNIT_SCALES, key=len, reverse=True)
_BRACKET = re.compile(r"^(.*?)\s*[\[(]\s*([^\])]*)\s*[\])]\s*$")
_SEP = re.compile(r"[\s.\-/:]+")
_GPU_PREFIX = re.compile(r"^(?:gpu|cuda|device|dev)_?(\d+)_(.+)$")
_GPU_SUFFIX = re.compile(r"^(.+?)_(?:gpu|cuda|device|dev)_?(\d+)$")
_INDEX_SUFFIX = re.compile(r"^(.+?)_(\d+)$")


def normalise(header: str) -> tuple[str, str | None]:
    """(name, unit) of a header cell: `Power Draw [W]` -> ("power_draw", "w")."""
    text = header.strip().strip('"').strip()
    unit = None
    m = _BRACKET.match(text)
    if m and m.group(1):
        text, unit = m.group(1), m.group(2).strip().lower() or None
    name = _SEP.sub("_", text.lower()).strip("_")
    name = name.replace("%", "_pct").strip("_")
    if name.startswith("dcgm_fi_"):
        name = name[len("dcgm_fi_") :]
    if unit is not None:
        unit = _SEP.sub("_", unit.replace("/", "_")).strip("_")
    return name, unit


def recognise(name: str, unit: str | None) -> ColumnKind | None:
    """The column's kind from its normalised name and unit, or None if unknown."""
    kind = ALIASES.get(name)
    suffix_unit = None
    if kind is None:
        for u in _UNITS_LONGEST_FIRST:
            if name.endswith("_" + u) and name[: -len(u) - 1] in ALIASES:
                kind, suffix_unit = ALIASES[name[: -len(u) - 1]], u
                break
    if kind is None:
        return None
    unit = unit or suffix_unit
    if kind.role != "metric" or unit is None or unit not in _UNIT_SCALES:
        return kind
    scales = _UNIT_SCALES[unit]
    scale = scales.get(kind.metric, scales[None])
    return ColumnKind(kind.role, kind.metric, scale, kind.priority)


def unit_scale(metric: Metric, unit: str) -> float | None:
    """The factor from `unit` (`percent`, `mw`, `mib`, ...) to the metric's unit, or None."""
    key = _SEP.sub("_", unit.strip().lower().replace("/", "_")).strip("_")
    scales = _UNIT_SCALES.get(key)
    return None if scales is None else scales.get(metric, scales[None])


def split_gpu(name: str) -> tuple[str, str] | None:
    """(field name, GPU index digits) of a wide-layout name (`gpu0_power_w` -> ("power_w", "0")).

    The digits stay text: the caller bounds them (`limits.gpu_index`) before
    converting, so a header naming GPU 10**5000 is an error, not a traceback.
    """
    for pat, field_group, index_group in ((_GPU_PREFIX, 2, 1), (_GPU_SUFFIX, 1, 2)):
        m = pat.match(name)
        if m:
            return m.group(field_group), m.group(index_group)
    m = _INDEX_SUFFIX.match(name)
    if m and m.group(1) in ALIASES:
        return m.group(1), m.group(2)
    return None


def known_names() -> str:
    """A short list of recognised spellings, for error messages."""
    return (
        "timestamp/time, gpu/index, power_w/power.draw, gpu_util_pct/utilization.gpu, "
        "sm_active, tensor_active, sm_clock_mhz, temp_c, mem_used_mib, throttle_reasons, "
        "DCGM_FI_* names"
    )
