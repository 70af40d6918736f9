"""docs/daemon.md "Limits" against the code and the tests: every bound listed, each one tested.

`ROWS` maps each row of the table (its first column) to the bounds it
states: the constant in the code, how the row spells it (checked to be in
the row and to equal the constant), and the tests that exercise it with a
string each test's source must hold (the case that hits the bound). Every
bound constant of `bubblewatch/limits.py`, the daemon, its HTTP client, its
alert sinks and the NVML source must be in some row, so a new bound without a row fails here,
and so does a row, a test or a spelling that no longer matches.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "daemon.md"

HOSTILE = "tests/hostile/"
INPUTS = HOSTILE + "test_daemon_inputs.py::"
RECORDED = HOSTILE + "test_recorded_inputs.py::"
IMPORTS = HOSTILE + "test_import_bounds.py::"
BOUNDS = HOSTILE + "test_config_bounds.py::"
READS = HOSTILE + "test_read_bounds.py::"


@dataclass(frozen=True)
class Bound:
    """A bound the row states: `constant` is "module:NAME" or "module:Callable(param)"."""

    constant: str
    spelling: str  # as the row writes it
    tests: tuple[tuple[str, str], ...]  # (test id, what its source must hold)
    value: str | None = None  # the part of `spelling` that is the number, if not all of it


ROWS: dict[str, tuple[Bound, ...]] = {
    "YAML: config, web config, topology, scenario and rule files, `simulate --set` values": (
        Bound(
            "limits:YAML_MAX_BYTES",
            "1 MiB per file",
            (
                (INPUTS + "test_config_file", "larger than 1048576"),
                (RECORDED + "test_topology_file", "larger than 1048576 bytes"),
            ),
            "1 MiB",
        ),
        Bound(
            "limits:YAML_MAX_DEPTH",
            "nesting 64 levels",
            (
                (INPUTS + "test_config_file", "nests deeper than 64 levels"),
                (RECORDED + "test_scenario_override_value_nested", "nests deeper"),
            ),
            "64",
        ),
        Bound(
            "limits:YAML_MAX_NODES",
            "50000 values",
            (
                (INPUTS + "test_config_file", "more than 50000 values"),
                (RECORDED + "test_scenario_file", "more than 50000 values"),
            ),
            "50000",
        ),
        Bound(
            "limits:MAX_INT_DIGITS",
            "integers of 30 digits",
            ((INPUTS + "test_config_file", "more than 30 digits"),),
            "30",
        ),
    ),
    "rule files (also)": (
        Bound(
            "rules.loader:MAX_RULES",
            "500 rules per set",
            ((READS + "test_a_rule_set_beyond_500_rules_is_refused", "MAX_RULES"),),
            "500",
        ),
    ),
    "`url_file`, `secret_file`": (
        Bound(
            "limits:SECRET_FILE_MAX_BYTES",
            "64 KiB",
            ((READS + "test_a_secret_file_over_64_kib_is_refused", "SECRET_FILE_MAX_BYTES"),),
        ),
    ),
    "every file read whole (config, web config, rule, topology, scenario, `url_file`, "
    "`secret_file`)": (
        Bound(
            "limits:READ_DEADLINE_S",
            "read in 10 s",
            (
                (READS + "test_a_file_read_past_the_deadline_is_refused", "READ_DEADLINE_S"),
                (
                    HOSTILE + "test_config_fifo.py::test_every_reader_refuses_a_fifo_at_once",
                    "not a regular file",
                ),
            ),
            "10 s",
        ),
    ),
    "web config": (
        Bound(
            "daemon.config.web:BCRYPT_MAX_COST",
            "bcrypt cost 4..14",
            ((INPUTS + "test_web_config_file", "cost must be 4..14"),),
            "14",
        ),
    ),
    "trace files (JSON Lines, plain or gzip)": (
        Bound(
            "limits:MAX_LINE_BYTES",
            "16 MiB per line",
            ((RECORDED + "test_trace_line_over_the_bound", "MAX_LINE_BYTES"),),
            "16 MiB",
        ),
        Bound(
            "limits:JSON_MAX_DEPTH",
            "JSON nesting 64",
            ((RECORDED + "test_trace_records", "nests deeper than 64 levels"),),
            "64",
        ),
        Bound(
            "limits:TRACE_MAX_GPUS",
            "1024 GPUs in the header",
            ((RECORDED + "test_trace_header_of_100k_gpus_is_refused_at_once", "100"),),
            "1024",
        ),
        Bound(
            "limits:MAX_GPU_INDEX",
            "up to 1048575",
            ((IMPORTS + "test_trace_gpu_index_beyond_the_bound", "index"),),
            "1048575",
        ),
    ),
    "nvidia-smi CSV, dcgmi dmon text, any logger's CSV": (
        Bound(
            "limits:CSV_MAX_COLUMNS",
            "65536 cells in a CSV header",
            ((IMPORTS + "test_header_of_two_million_cells_is_refused_before_splitting", "cells"),),
            "65536",
        ),
        Bound(
            "limits:CSV_MAX_GPUS",
            "1024 GPUs per file",
            (
                (IMPORTS + "test_wide_csv_beyond_the_gpu_bound_is_refused", "CSV_MAX_GPUS"),
                (IMPORTS + "test_nvidia_smi_with_more_gpus_than_the_bound", "CSV_MAX_GPUS"),
                (IMPORTS + "test_dcgmi_with_more_gpus_than_the_bound", "CSV_MAX_GPUS"),
            ),
            "1024",
        ),
        Bound(
            "limits:MAX_LINE_BYTES",
            "16 MiB per line",
            (
                (RECORDED + "test_dcgmi_long_line", "MAX_LINE_BYTES"),
                (RECORDED + "test_nvidia_smi_csv", "MAX_LINE_BYTES"),
            ),
            "16 MiB",
        ),
    ),
    "profiler (Kineto) traces": (
        Bound(
            "limits:KINETO_MAX_FILE_BYTES",
            "4 GiB per file",
            (
                (
                    RECORDED + "test_kineto_file_larger_than_the_bound_refused_at_once",
                    "KINETO_MAX_FILE_BYTES",
                ),
            ),
            "4 GiB",
        ),
        Bound(
            "limits:KINETO_MAX_FILES",
            "1024 files read together",
            (
                (
                    RECORDED + "test_kineto_too_many_files_refused_before_reading_any",
                    "KINETO_MAX_FILES",
                ),
            ),
            "1024",
        ),
        Bound(
            "limits:KINETO_MAX_DEVICES",
            "at most 1024 devices",
            ((RECORDED + "test_kineto_devices_in_one_file", "KINETO_MAX_DEVICES"),),
            "1024",
        ),
        Bound(
            "limits:KINETO_MAX_RANK",
            "up to 1048575",
            ((IMPORTS + "test_kineto_device_beyond_the_documented_rank_bound", "KINETO"),),
            "1048575",
        ),
        Bound(
            "sources.kineto._jsonstream:MAX_VALUE_CHARS",
            "64 MiB per event or header value",
            ((READS + "test_a_kineto_value_over_the_bound_is_refused", "MAX_VALUE_CHARS"),),
            "64 MiB",
        ),
    ),
    "parallel sizes: engine command lines (discovered, in topology files, `--engine-cmdline`), "
    "`--pp-size`/`--tp-size`": (
        Bound(
            "limits:TOPOLOGY_MAX_GPUS",
            "at most 1048576",
            ((RECORDED + "test_kineto_pipeline_sizes", "TOPOLOGY_MAX_GPUS"),),
            "1048576",
        ),
    ),
    "Prometheus answers (`analyze`, `compare`, `fleet` with `--prometheus`)": (
        Bound(
            "limits:PROMETHEUS_MAX_RESPONSE_BYTES",
            "256 MiB per answer",
            (
                (
                    HOSTILE + "test_prometheus_answers.py::"
                    "test_a_declared_length_over_the_bound_is_refused_before_reading",
                    "PROMETHEUS_MAX_RESPONSE_BYTES",
                ),
            ),
            "256 MiB",
        ),
    ),
    "gzip, any of the above": (
        Bound(
            "limits:GZIP_RATIO_AFTER_BYTES",
            "passes 8 MiB",
            ((RECORDED + "test_gzip_bomb_of_1gib_in_bounded_memory", "inflates more than"),),
            "8 MiB",
        ),
        Bound(
            "limits:GZIP_MAX_RATIO",
            "200 times",
            ((RECORDED + "test_kineto_gzip_bomb", "1 << 30"),),
            "200",
        ),
    ),
    "`sampling.history`": (
        Bound(
            "limits:HISTORY_MAX_SAMPLES",
            "100000 samples per GPU",
            ((INPUTS + "test_config_file", "more than 100000 samples per GPU"),),
            "100000",
        ),
        Bound(
            "daemon.ring:BUFFER_MAX_RATE_HZ",
            "50 per second",
            (
                (
                    "tests/daemon/test_ring.py::"
                    "test_ring_memory_is_bounded_and_flat_at_any_driver_rate",
                    "BUFFER_MAX_RATE_HZ",
                ),
            ),
            "50",
        ),
    ),
    "Xid events from NVML (`run`, `record` on a GPU host)": (
        Bound(
            "sources.nvml.sampler:MAX_EVENTS_PER_TICK",
            "64 read per poll",
            (
                (
                    "tests/nvml/test_nvml_sampler.py::"
                    "test_an_xid_storm_is_read_64_a_poll_and_none_is_lost",
                    "MAX_EVENTS_PER_TICK",
                ),
            ),
            "64",
        ),
    ),
    "`analysis.window`": (
        Bound(
            "limits:ANALYSIS_MAX_WINDOW_S", "1 h", ((INPUTS + "test_config_file", "at most 3600s"),)
        ),
    ),
    "`analysis.peak_horizon`, `analyze --peak-horizon`": (
        Bound(
            "limits:PEAK_MAX_HORIZON_S",
            "at most 30 d",
            (
                (
                    "tests/daemon/test_config.py::test_peak_horizon_default_file_flag_and_bounds",
                    "31d",
                ),
            ),
            "30 d",
        ),
    ),
    "durations of the config (file or flag)": (
        Bound(
            "daemon.config.file:MIN_SAMPLING_INTERVAL_S",
            "`sampling.interval` 100 ms",
            ((BOUNDS + "test_the_bounds_themselves_are_accepted", "100ms"),),
            "100 ms",
        ),
        Bound(
            "limits:SAMPLING_MAX_INTERVAL_S",
            "100 ms..30 min",
            (
                (
                    BOUNDS + "test_a_huge_duration_is_refused_naming_file_line_field_and_range",
                    "at most",
                ),
            ),
            "30 min",
        ),
        Bound(
            "limits:ANALYSIS_MAX_INTERVAL_S",
            "`analysis.interval` up to 1 h",
            ((BOUNDS + "test_the_bounds_themselves_are_accepted", "1h"),),
            "1 h",
        ),
        Bound(
            "limits:DAY_S",
            "`log.ratelimit_interval` up to 1 d",
            ((BOUNDS + "test_the_bounds_themselves_are_accepted", "1d"),),
            "1 d",
        ),
        Bound(
            "limits:DURATION_MAX_S",
            "`alerting.repeat_interval` up to 30 d",
            (
                (
                    BOUNDS + "test_a_huge_duration_is_refused_naming_file_line_field_and_range",
                    "200000d",
                ),
            ),
            "30 d",
        ),
        Bound(
            "limits:RECORD_MAX_AGE_S",
            "`record.max_age` up to 365 d",
            ((BOUNDS + "test_the_bounds_themselves_are_accepted", "365d"),),
            "365 d",
        ),
        Bound(
            "limits:RECEIVER_MIN_TIMEOUT_S",
            "`alerting.timeout` 10 ms",
            ((BOUNDS + "test_a_timeout_below_the_minimum_is_refused", "between 10ms and 5m"),),
            "10 ms",
        ),
        Bound(
            "limits:RECEIVER_MAX_TIMEOUT_S",
            "10 ms..5 min",
            ((BOUNDS + "test_a_timeout_below_the_minimum_is_refused", "between 10ms and 5m"),),
            "5 min",
        ),
        Bound(
            "limits:BACKOFF_MIN_S",
            "`initial_backoff` 1 ms",
            ((BOUNDS + "test_the_bounds_themselves_are_accepted", "1ms"),),
            "1 ms",
        ),
        Bound(
            "limits:INITIAL_BACKOFF_MAX_S",
            "1 ms..1 h",
            (
                (
                    BOUNDS + "test_the_bounds_themselves_are_accepted",
                    "initial_backoff",
                ),
            ),
            "1 h",
        ),
    ),
    "counts of the config": (
        Bound(
            "limits:WEB_MAX_REQUESTS",
            "`web.max_requests` 1..1024",
            ((BOUNDS + "test_counts_are_bounded_too", "must be 1..1024"),),
            "1024",
        ),
        Bound(
            "limits:ALERT_MAX_QUEUE",
            "`alerting.max_queue` 1..100000",
            ((BOUNDS + "test_counts_are_bounded_too", "must be 1..100000"),),
            "100000",
        ),
        Bound(
            "limits:RECORD_MAX_KEEP",
            "`record.keep` 0..100000",
            ((BOUNDS + "test_counts_are_bounded_too", "must be 0..100000"),),
            "100000",
        ),
        Bound(
            "limits:KINETO_MAX_RANK",
            "`topology.first_stage` 0..1048575",
            ((BOUNDS + "test_counts_are_bounded_too", "must be 0..1048575"),),
            "1048575",
        ),
    ),
    "a receiver's answer": (
        Bound(
            "sinks.alerts.transport:MAX_RESPONSE_BYTES",
            "body 64 KiB",
            (
                (
                    HOSTILE
                    + "test_outbound_http.py::test_a_broken_answer_is_the_clients_own_error",
                    "larger than 65536",
                ),
            ),
            "64 KiB",
        ),
    ),
    "every outbound HTTP request (receivers, `--prometheus`, engine `/metrics` and "
    "`/server_info`), one client: `bubblewatch/http_client.py`": (
        Bound(
            "sources.engine_metrics:DEFAULT_MAX_BYTES",
            "engine `/metrics` 8 MiB",
            (
                (
                    "tests/topology/test_engine_metrics.py::test_oversized_answer_is_refused",
                    "max_bytes",
                ),
            ),
            "8 MiB",
        ),
        Bound(
            "sources.engine_state:DEFAULT_MAX_BYTES",
            "`/server_info` 4 MiB",
            (
                (
                    "tests/sources/test_engine_state.py::"
                    "test_an_oversized_slow_or_absent_answer_is_a_reason_never_an_exception",
                    "max_bytes",
                ),
            ),
            "4 MiB",
        ),
    ),
    "simulator (`simulate`, `diagnose --simulate`, `run --simulate`, scenario files)": (
        Bound(
            "limits:SIM_MAX_GPUS",
            "1024 GPUs",
            ((RECORDED + "test_simulation_sizes", "4096 GPUs; at most 1024"),),
            "1024",
        ),
        Bound(
            "limits:SIM_MAX_CONCURRENCY",
            "100000 requests outstanding",
            ((RECORDED + "test_simulation_sizes", "at most 100000"),),
            "100000",
        ),
        Bound(
            "limits:SIM_MAX_GPU_CELLS",
            "timeline cells at most 10 million",
            ((RECORDED + "test_simulation_sizes", "timeline cells"),),
            "10 million",
        ),
        Bound(
            "limits:SIM_MAX_SAMPLES",
            "GPUs x polls at most 10 million",
            ((RECORDED + "test_simulation_sizes", "samples; at most"),),
            "10 million",
        ),
        Bound(
            "limits:SIM_MAX_TOKEN_LAYER_S",
            "within 3600 s",
            (
                (
                    HOSTILE
                    + "test_sim_numbers.py::test_rates_so_small_that_a_token_never_finishes",
                    "SIM_MAX_TOKEN_LAYER_S",
                ),
            ),
            "3600 s",
        ),
    ),
    "the recording's disk (`record.path`)": (
        Bound(
            "daemon.record.recorder:RETRY_S",
            "a new file tried every 10 s",
            (
                (
                    HOSTILE + "test_record_full_disk.py::"
                    "test_a_full_small_disk_stops_recording_once_and_resumes_when_space_returns",
                    "four tries at a new file",
                ),
            ),
            "10 s",
        ),
    ),
    "HTTP requests": (
        Bound(
            "daemon.http.message:MAX_HEAD_BYTES",
            "head 8 KiB",
            ((HOSTILE + "test_http_load.py::test_request_heads_have_a_deadline", "431"),),
            "8 KiB",
        ),
        Bound(
            "daemon.http.server:MetricsServer(request_timeout_s)",
            "10 s to arrive",
            (
                (
                    HOSTILE + "test_http_load.py::test_request_heads_have_a_deadline",
                    "request_timeout_s",
                ),
            ),
            "10 s",
        ),
        Bound(
            "daemon.config.listen:DEFAULT_MAX_REQUESTS",
            "40 answered at once",
            (
                (
                    HOSTILE + "test_http_refusals.py::test_fast_503_past_max_requests_is_counted",
                    "max_requests",
                ),
            ),
            "40",
        ),
        Bound(
            "daemon.http.server:MAX_CONNECTIONS",
            "2048 connections",
            (
                (
                    HOSTILE + "test_http_load.py::test_connection_cap_evicts_the_longest_waiting",
                    "max_connections",
                ),
            ),
            "2048",
        ),
    ),
    "stopping (`SIGTERM`, `SIGINT`)": (
        Bound(
            "daemon.loop.state:SHUTDOWN_ALERT_TIMEOUT_S",
            "at most 2 s",
            (
                (
                    "tests/daemon/test_loop_in_process.py::"
                    "test_a_stalled_receiver_does_not_hold_the_stop",
                    "SHUTDOWN_ALERT_TIMEOUT_S",
                ),
            ),
            "2 s",
        ),
    ),
}

# Constants the scan below finds that bound nothing an input can push (with why).
NOT_BOUNDS = {
    "daemon.sources.simsource:GPM_MIN_INTERVAL_S": "the simulator imitating NVML's GPM rule",
    "limits:MAX_GPU_INDEX_DIGITS": "MAX_GPU_INDEX's digit count, stated by that bound",
    "sources.nvml.errors:ERROR_TIMEOUT": "NVML's return code for a wait that timed out",
    "sources.nvml.reader:GPM_MIN_INTERVAL_S": "NVML's own GPM rule, as the simulator's",
}
SCANNED = ("limits", "http_client", "daemon", "sinks.alerts", "sources.nvml")
# Outside limits.py, a bound says so in its name; in limits.py every number is one.
BOUND_NAME = re.compile(r"(?:[A-Z0-9_]*_)?(?:MAX|MIN|DEADLINE|TIMEOUT)(?:_[A-Z0-9_]*)?")

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "ms": 0.001, "s": 1.0,
         "min": 60.0, "h": 3600.0, "d": 86400.0, "million": 1e6}  # fmt: skip


def table() -> dict[str, str]:
    """Row label -> the rest of the row, from the Limits section of docs/daemon.md."""
    text = DOC.read_text()
    section = text.split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    out: dict[str, str] = {}
    for line in rows[1:]:  # the header
        label, rest = line[2:].split(" | ", 1)
        out[label] = rest
    return out


def number(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(?: ?(\w+))?", text)
    assert m is not None, f"not a number with a unit: {text!r}"
    return float(m.group(1)) * UNITS.get(m.group(2) or "", 1.0)


def resolve(ref: str) -> float:
    module, _, name = ref.partition(":")
    mod = importlib.import_module(f"bubblewatch.{module}")
    if "(" in name:
        func, param = name[:-1].split("(")
        return float(inspect.signature(getattr(mod, func)).parameters[param].default)
    return float(getattr(mod, name))


@cache
def function_sources(path: str) -> dict[str, str]:
    """Each test function's source in `path`, with its decorators (its parameters) and the
    module-level tables it names (parameter lists kept beside it)."""
    text = (ROOT / path).read_text()
    lines = text.splitlines()
    tree = ast.parse(text)

    def segment(node: ast.stmt) -> str:
        decorators = getattr(node, "decorator_list", [])
        first = min([node.lineno] + [d.lineno for d in decorators])
        return "\n".join(lines[first - 1 : node.end_lineno])

    tables = {
        t.id: segment(node)
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            own = segment(node)
            named = [src for name, src in tables.items() if re.search(rf"\b{name}\b", own)]
            out[node.name] = "\n".join([own, *named])
    return out


def scanned_bounds() -> set[str]:
    """Module-level bound constants ("module:NAME") of the scanned parts of the package."""
    found: set[str] = set()
    pkg = ROOT / "bubblewatch"
    for part in SCANNED:
        base = pkg / part.replace(".", "/")
        files = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
        for f in files:
            module = ".".join(f.relative_to(pkg).with_suffix("").parts)
            for node in ast.parse(f.read_text()).body:
                for target in node.targets if isinstance(node, ast.Assign) else []:
                    names = target.elts if isinstance(target, ast.Tuple) else [target]
                    for n in names:
                        if isinstance(n, ast.Name) and _is_bound(module, n.id):
                            found.add(f"{module}:{n.id}")
    return found


def _is_bound(module: str, name: str) -> bool:
    if name.startswith("_") or not (module == "limits" or BOUND_NAME.fullmatch(name)):
        return False
    value = getattr(importlib.import_module(f"bubblewatch.{module}"), name)
    return isinstance(value, int | float) and not isinstance(value, bool)


def test_every_row_is_mapped_and_every_mapping_is_a_row() -> None:
    rows = table()
    assert set(rows) - set(ROWS) == set(), "rows of the table no test here maps"
    assert set(ROWS) - set(rows) == set(), "mapped rows the table no longer has"


@pytest.mark.parametrize("label", list(ROWS))
def test_each_bound_is_spelled_in_its_row_as_the_code_has_it(label: str) -> None:
    row = table()[label]
    for b in ROWS[label]:
        assert b.spelling in row, f"{label}: {b.spelling!r} not in the row"
        value = b.value or b.spelling
        assert value in b.spelling
        assert number(value) == pytest.approx(resolve(b.constant)), (label, b.constant)


@pytest.mark.parametrize("label", list(ROWS))
def test_each_bound_has_a_test_that_hits_it(label: str) -> None:
    for b in ROWS[label]:
        assert b.tests, f"{label}: {b.constant} has no test"
        for test_id, evidence in b.tests:
            path, _, name = test_id.partition("::")
            sources = function_sources(path)
            assert name in sources, f"{test_id} does not exist"
            assert evidence in sources[name], f"{test_id} does not hold {evidence!r}"


def test_every_bound_constant_is_in_a_row() -> None:
    stated = {b.constant for bounds in ROWS.values() for b in bounds}
    missing = scanned_bounds() - stated - set(NOT_BOUNDS)
    assert missing == set(), "bounds in the code that docs/daemon.md, Limits does not list"


def test_the_scan_is_not_blind() -> None:
    """The scan finds bounds in each part it reads, so the check above can fail."""
    found = scanned_bounds()
    for part in ("limits:", "daemon.", "sinks.alerts.", "sources.nvml."):
        assert any(c.startswith(part) for c in found), part
    assert {"daemon.http.server:MAX_CONNECTIONS", "limits:DAY_S"} <= found
    assert (
        "limits:LIMITS_DOC" not in found
        and "daemon.config.listen:DEFAULT_LISTEN_ADDRESS" not in found
    )
