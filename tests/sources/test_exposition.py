"""The fast /metrics reader gives exactly what prometheus_client's parser gives.

Differential: `samples_named` (the fast path, falling back to the parser)
against `exposition_samples` (the parser over the whole page), on a real vLLM
page, the SGLang/vLLM/TensorRT-LLM texts of the other tests, hand-made hostile
pages and seeded random mutations of the real page. Results are compared by
`repr` so that an int differs from a float and NaN equals NaN; errors by type
and message.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from nvml.engine_server import SGLANG_METRICS
from topology.test_engine_metrics import SGLANG_DP_TEXT, SGLANG_TEXT, VLLM_TEXT

from bubblewatch.sources import _exposition, engine_metrics
from bubblewatch.sources._exposition import exposition_samples, samples_named
from bubblewatch.sources.engine_metrics import MetricsParseError, parse_load_figures

REAL = (Path(__file__).parents[1] / "fixtures" / "engine_metrics" / "vllm-0.32-cpu.txt").read_text()
NAMES = frozenset(
    {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
    }
)
RUN = 'vllm:num_requests_running{engine="0",model_name="m"}'


def outcome(read, text: str, names=NAMES) -> str:
    try:
        return repr(read(text, names))
    except Exception as e:  # the parser's own error is part of what must match
        return f"{type(e).__name__}: {e}"


def assert_same(text: str, names=NAMES) -> str:
    fast, full = outcome(samples_named, text, names), outcome(exposition_samples, text, names)
    assert fast == full, text[:500]
    return fast


def took_fast_path(text: str) -> bool:
    try:
        _exposition._fast(text, NAMES)
    except _exposition._OutsideShape:
        return False
    return True


def test_the_real_vllm_page_takes_the_fast_path_and_reads_the_same():
    got = assert_same(REAL)
    assert took_fast_path(REAL)
    assert "vllm:num_requests_running" in got and "vllm:num_requests_waiting" in got
    every = {line.split("{")[0].split(" ")[0] for line in REAL.splitlines() if line[:1] != "#"}
    assert len(every) > 100
    assert_same(REAL, every)  # every family of the page, not only the two gauges


@pytest.mark.parametrize(
    "text",
    [
        SGLANG_TEXT,
        SGLANG_DP_TEXT,
        VLLM_TEXT,
        SGLANG_METRICS.format(running=5, queued=2),
    ],
)
def test_the_engine_texts_of_the_other_tests_read_the_same(text):
    assert_same(text)
    assert took_fast_path(text)


HOSTILE = {
    "empty": "",
    "garbage": "hello world {{{",
    "binary": "\x00\xff<html>not metrics</html>",
    "missing families": "# TYPE other gauge\nother 1\n",
    "duplicate series": f"{RUN} 3\n{RUN} 5\n",
    "duplicate series across families": (
        f"# TYPE vllm:num_requests_running gauge\n{RUN} 3\nx 1\n{RUN} 9\n"
    ),
    "nan and inf": (
        f"{RUN} NaN\n"
        'vllm:num_requests_running{engine="1"} +Inf\n'
        'vllm:num_requests_waiting{engine="0"} -inf\n'
        'vllm:num_requests_waiting{engine="1"} 1e3\n'
    ),
    "ints and floats": f'{RUN} 7\nvllm:num_requests_waiting{{engine="0"}} 7.0\n',
    "a 400-digit value": f"{RUN} {'9' * 400}\n",
    "a 5000-digit value": f"{RUN} {'9' * 5000}\n",
    "a 400-digit timestamp": f"{RUN} 1 {'9' * 400}\n",
    "timestamps": f"{RUN} 1 1700000000000\n{RUN} 2 -5\n{RUN} 3 1.5e3\n",
    "several values": f"{RUN} 1 2 3\n",
    "no space before the value": f"{RUN}4\n",
    "tabs": f"{RUN}\t4\n\t# TYPE x\tgauge\t\n",
    "crlf": REAL[:3000].replace("\n", "\r\n"),
    "openmetrics eof": f"# TYPE vllm:num_requests_running gauge\n{RUN} 2\n# EOF\n{RUN} 4\n",
    "unit comment": f"# UNIT vllm:num_requests_running requests\n{RUN} 2\n",
    "exemplar": f'{RUN} 2 # {{trace_id="abc"}} 1.0\n',
    "escapes": (
        'vllm:num_requests_running{model_name="a\\"b\\\\c\\nd\\t",engine="0"} 1\n'
        'vllm:num_requests_running{model_name="x}y,z=\\"q\\"",engine="1"} 2\n'
    ),
    "utf-8 label value": 'vllm:num_requests_running{model_name="Kimi-K2 \u00e9\u6a21\u578b"} 3\n',
    "quoted metric name": '{"vllm:num_requests_running",engine="0"} 3\n',
    "name in __name__": '{__name__="vllm:num_requests_running",engine="0"} 3\n',
    "reserved label": 'vllm:num_requests_running{__engine="0"} 3\n',
    "duplicate label": 'vllm:num_requests_running{engine="0",engine="1"} 3\n',
    "duplicate label, unread family": REAL + 'other{a="1",b="2",a="3"} 1\n',
    "duplicate label behind an escape": 'x{a="\\"",a="2"} 1\n' + REAL,
    "label with a colon": 'vllm:num_requests_running{a:b="0"} 3\n',
    "trailing comma": 'vllm:num_requests_running{engine="0",} 3\n',
    "empty labels": "vllm:num_requests_running{} 3\n",
    "spaces in labels": 'vllm:num_requests_running{ engine = "0" } 3\n',
    "unquoted label value": "vllm:num_requests_running{engine=0} 3\n",
    "label without value": 'vllm:num_requests_running{engine=,a="1"} 3\n',
    "bad value, unread family": REAL + "other 1.2.3\n",
    "underscore in value": f"{RUN} 1_000\n",
    "bogus type": f"# TYPE vllm:num_requests_running bogus\n{RUN} 1\n",
    "bogus type, unread family": "# TYPE other bogus\nother 1\n" + REAL,
    "type without a type": f"# TYPE vllm:num_requests_running\n{RUN} 1\n",
    "help alone": f"# HELP\n{RUN} 1\n",
    "type with two words": f"# TYPE vllm:num_requests_running gauge extra\n{RUN} 1\n",
    "counter type renames": f"# TYPE vllm:num_requests_running counter\n{RUN} 1\n",
    "counter of _total": "# TYPE _total counter\n_total 1\n" + REAL,
    "counter ended by another help": (
        f"# TYPE vllm:num_requests_running counter\n# HELP other x\n{RUN} 1\n"
    ),
    "type after samples": f"# HELP vllm:num_requests_running x\n{RUN} 1\n"
    "# TYPE vllm:num_requests_running counter\n",
    "histogram of a wanted prefix": (
        "# TYPE vllm:num_requests histogram\nvllm:num_requests_running 1\n"
        "vllm:num_requests_count 3\n"
    ),
    "summary keeps its own name": "# TYPE vllm:num_requests_running summary\n" + f"{RUN} 4\n",
    "help with quotes and tabs": f'# HELP vllm:num_requests_running a "b\tc\n{RUN} 1\n',
    "help glued to a quote": f'# HELP vllm:num_requests_running"x y\n{RUN} 1\n',
    "comment naming TYPE": f"#TYPE vllm:num_requests_running counter\n{RUN} 1\n",
    "indented lines": f"   # TYPE vllm:num_requests_running gauge\n   {RUN} 6   \n\n  \n",
    "huge line": 'other{a="' + "x" * 1_000_000 + '"} 1\n' + f"{RUN} 2\n",
    "huge label set": "other{" + ",".join(f'l{i}="v"' for i in range(5000)) + "} 1\n" + RUN + " 2",
    "huge unterminated value": 'other{a="' + "x" * 200_000 + "\n" + f"{RUN} 2\n",
    "no final newline": f"# TYPE vllm:num_requests_running gauge\n{RUN} 8",
    "sglang ranks and priorities": (
        'sglang:num_running_reqs{pp_rank="0",tp_rank="0",priority="1"} 3\n'
        'sglang:num_running_reqs{pp_rank="1",tp_rank="0",priority="1"} 4\n'
        'sglang:num_queue_reqs{pp_rank="0",tp_rank="0",priority="2"} 9\n'
    ),
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_pages_read_the_same_or_fail_the_same(text):
    assert_same(text)


def test_the_common_shape_is_what_takes_the_fast_path():
    """The cases above exercise both paths: the fast one must not be a dead branch."""
    fast = {name for name, text in HOSTILE.items() if took_fast_path(text)}
    assert {"duplicate series", "nan and inf", "escapes", "counter ended by another help"} <= fast
    assert {"huge line", "huge label set", "openmetrics eof", "type after samples"} <= fast
    assert not {"quoted metric name", "duplicate label", "crlf", "exemplar", "tabs"} & fast


def mutate(rng: random.Random, lines: list[str]) -> str:
    out = list(lines)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(out))
        op = rng.randrange(6)
        if op == 0:
            del out[i]
        elif op == 1:
            out.insert(i, out[rng.randrange(len(out))])  # a duplicate line, elsewhere
        elif op == 2:
            j = rng.randrange(len(out[i]) + 1)
            out[i] = out[i][:j] + rng.choice('{}",= #\\\t_:.e+-nN0\r\x00\u00e9') + out[i][j:]
        elif op == 3:
            j = rng.randrange(len(out[i]) + 1)
            out[i] = out[i][:j]
        elif op == 4:
            out[i] = out[i].replace("gauge", rng.choice(["counter", "histogram", "summary", "x"]))
        else:
            rng.shuffle(out)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("base", ["real", "engine texts"])
def test_random_mutations_read_the_same(base):
    if base == "real":
        lines = REAL.splitlines()
        at = next(i for i, line in enumerate(lines) if "num_requests_running" in line)
        lines = lines[max(0, at - 30) : at + 30]  # the wanted families among others
    else:
        lines = (SGLANG_TEXT + VLLM_TEXT + HOSTILE["escapes"]).splitlines()
    rng = random.Random(20261201)
    fast = 0
    for _ in range(500):
        text = mutate(rng, lines)
        assert_same(text)
        fast += took_fast_path(text)
    assert 50 < fast < 500  # both paths were compared


def reference_figures(text: str, monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as m:
        m.setattr(engine_metrics, "samples_named", exposition_samples)
        return outcome(lambda t, _: parse_load_figures(t), text)


@pytest.mark.parametrize(
    "text",
    [
        REAL,
        SGLANG_TEXT,
        SGLANG_DP_TEXT,
        VLLM_TEXT,
        '[{"iter": 10, "numActiveRequests": 3, "numQueuedRequests": 1}]',  # TensorRT-LLM
        *HOSTILE.values(),
    ],
)
def test_load_figures_are_those_of_the_full_parser(text, monkeypatch):
    assert outcome(lambda t, _: parse_load_figures(t), text) == reference_figures(text, monkeypatch)


def test_bad_pages_get_the_parse_error_not_a_traceback():
    for text in (HOSTILE["a 400-digit timestamp"], HOSTILE["a 400-digit value"]):
        with pytest.raises(MetricsParseError):
            parse_load_figures(text)
    with pytest.raises(MetricsParseError, match="Invalid labels"):
        parse_load_figures(HOSTILE["duplicate label, unread family"])
