"""The static topology file: format, example, and errors that point at file/line/field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bubblewatch.errors import InputError
from bubblewatch.topology.static import load_static_pipelines, load_topology_file

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "topology.yaml"


def write(tmp_path, text):
    p = tmp_path / "topo.yaml"
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_documented_example_loads():
    [sp] = load_static_pipelines(str(EXAMPLE))
    assert sp.topology.stages == tuple((g,) for g in range(8))
    assert sp.topology.pipeline_id == "kimi-pp8"
    assert sp.topology.interconnect == "pcie"
    assert sp.engine is not None and sp.engine.cuda_graph is False
    assert sp.engine.layer_partition == (8, 8, 8, 8, 8, 8, 8, 5)
    assert sp.metrics_url == "http://127.0.0.1:30000/metrics"
    assert load_topology_file(str(EXAMPLE)) == sp.topology


def test_sizes_and_cmdline_only(tmp_path):
    path = write(
        tmp_path,
        """\
        version: 1
        pipelines:
          - id: a
            pp_size: 2
            tp_size: 2
            base_gpu_id: 4
          - id: b
            cmdline: ["vllm", "serve", "m", "-pp", "2", "--api-key", "sk-abcdefghijklmnop99"]
        """,
    )
    a, b = load_static_pipelines(path)
    assert a.topology.stages == ((4, 5), (6, 7))
    assert b.topology.stages == ((0,), (1,))
    assert b.topology.engine == "vllm"
    assert "sk-abcdefghijklmnop99" not in repr(b)


def test_single_pipeline_at_top_level(tmp_path):
    path = write(tmp_path, "version: 1\nstages: [[0, 1], [2, 3]]\nengine: trtllm\n")
    assert load_topology_file(path).stages == ((0, 1), (2, 3))


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("version: 2\nstages: [[0]]\n", 1, "version", "unsupported version 2"),
        ("version: 1\npipelines: []\n", 2, "pipelines", "non-empty list"),
        (
            "version: 1\npipelines:\n  - id: a\n    stages: [[0], [0]]\n",
            4,
            "pipelines[0].stages",
            "GPU 0 is in stage 0 and stage 1",
        ),
        (
            "version: 1\npipelines:\n  - id: a\n    stages: [[0]]\n    interconect: pcie\n",
            5,
            "pipelines[0].interconect",
            "unknown key",
        ),
        (
            "version: 1\npipelines:\n  - id: a\n    stages: [[0]]\n    interconnect: infiniband\n",
            5,
            "pipelines[0].interconnect",
            "interconnect must be one of",
        ),
        (
            "version: 1\npipelines:\n  - id: a\n    cmdline: python train.py\n",
            4,
            "pipelines[0].cmdline",
            "not an SGLang",
        ),
        (
            "version: 1\npipelines:\n  - id: a\n    cmdline: vllm serve m -pp x\n",
            4,
            "pipelines[0].cmdline",
            "expects an integer",
        ),
        (
            "version: 1\npipelines:\n  - id: a\n    stages: [[0], [1]]\n"
            "    cmdline: vllm serve m -pp 4\n",
            4,
            "pipelines[0].stages",
            "cmdline says pp=4",
        ),
        ("version: 1\npipelines:\n  - id: a\n    engine: sglang\n", 3, None, "needs 'stages'"),
        (
            "version: 1\npipelines:\n  - {id: a, stages: [[0]]}\n  - {id: a, stages: [[1]]}\n",
            4,
            "pipelines[1].id",
            "duplicate pipeline id",
        ),
    ],
)
def test_errors_name_file_line_and_field(tmp_path, text, line, field, message):
    path = write(tmp_path, text)
    with pytest.raises(InputError, match=message) as info:
        load_static_pipelines(path)
    assert info.value.path == path
    assert info.value.line == line
    assert info.value.field == field


def test_yaml_syntax_error_has_a_line(tmp_path):
    path = write(tmp_path, "version: 1\nstages: [[0]\n")
    with pytest.raises(InputError, match="not valid YAML") as info:
        load_static_pipelines(path)
    assert info.value.line is not None


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read topology file"):
        load_static_pipelines(str(tmp_path / "nope.yaml"))
