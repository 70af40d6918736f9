"""`bubblewatch topology` end to end: no NVML here, fake trees, files and command lines."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from bubblewatch.cli import topology as cli_topology
from bubblewatch.cli.main import main

from .conftest import PROC_FIXTURES, Tree, assert_no_secret

EXAMPLE = str(Path(__file__).resolve().parents[2] / "docs" / "examples" / "topology.yaml")


@pytest.fixture
def no_nvml(monkeypatch):
    inv = cli_topology.NvmlInventory(
        False, reason="NVML unavailable: NVML Shared Library Not Found"
    )
    monkeypatch.setattr(cli_topology, "nvml_inventory", lambda: inv)


@pytest.fixture
def fake_nvml(monkeypatch):
    """NVML as the fixture tree describes it (GPUs and GPU -> PIDs)."""

    def install(name):
        t = Tree(name)
        inv = cli_topology.NvmlInventory(True, gpus=t.gpus, processes=t.processes)
        monkeypatch.setattr(cli_topology, "nvml_inventory", lambda: inv)
        return t

    return install


def run_json(capsys, *argv):
    rc = main(["topology", "--json", *argv])
    out = capsys.readouterr()
    return rc, json.loads(out.out), out


def test_real_nvml_probe_on_this_host_never_raises():
    inv = cli_topology.nvml_inventory()
    assert inv.available or (inv.reason and "NVML" in inv.reason)


def test_without_nvml_static_file_is_used_and_said(no_nvml, capsys, tmp_path):
    rc, doc, _ = run_json(capsys, "--topology-file", EXAMPLE, "--proc-root", str(tmp_path))
    assert rc == 0
    assert doc["nvml"]["available"] is False
    assert doc["method"] == "static-file"
    assert doc["pipelines"][0]["topology"]["stages"] == [[g] for g in range(8)]
    assert any("GPU list and GPU processes unknown" in n for n in doc["notes"])
    assert not any("NVML reports no compute processes" in w for w in doc["warnings"])


def test_without_nvml_proc_root_is_scanned(no_nvml, capsys):
    rc, doc, _ = run_json(capsys, "--proc-root", str(PROC_FIXTURES / "vllm_pp4_tp2"))
    assert rc == 0
    assert doc["method"] == "proc-scan"
    assert doc["pipelines"][0]["topology"]["stages"] == [[4, 5], [6, 7], [0, 1], [2, 3]]


def test_with_nvml_processes_are_traced(fake_nvml, capsys):
    t = fake_nvml("sglang_pp4_tp2_uuid")
    rc, doc, _ = run_json(capsys, "--proc-root", t.root)
    assert rc == 0
    assert doc["method"] == "proc"
    assert doc["pipelines"][0]["topology"]["stages"] == [[7, 6], [5, 4], [3, 2], [1, 0]]
    assert len(doc["nvml"]["gpus"]) == 8


def test_engine_cmdline_with_env_prefix(no_nvml, capsys):
    rc, doc, _ = run_json(
        capsys,
        "--engine-cmdline",
        "CUDA_VISIBLE_DEVICES=2,3 SGLANG_PP_LAYER_PARTITION=30,31 "
        "python -m sglang.launch_server --pp-size 2 --api-key sk-abcdefghijklmnopqrstu",
    )
    assert rc == 0
    p = doc["pipelines"][0]
    assert p["topology"]["stages"] == [[2], [3]]
    assert p["engine"]["layer_partition"] == [30, 31]
    assert "sk-abcdefghijklmnopqrstu" not in json.dumps(doc)


def test_engine_cmdline_that_is_not_an_engine_exits_2(no_nvml, capsys):
    assert main(["topology", "--engine-cmdline", "python train.py"]) == 2
    assert "not an SGLang, vLLM or TensorRT-LLM launch command" in capsys.readouterr().err


def test_bad_topology_file_exits_2_naming_the_field(no_nvml, capsys, tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("version: 1\npipelines:\n  - id: a\n    stages: [[0], [0]]\n")
    assert main(["topology", "--topology-file", str(bad), "--proc-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:4: field 'pipelines[0].stages'" in err


def test_nothing_found_exits_1_and_says_what_to_do(no_nvml, capsys, tmp_path):
    assert main(["topology", "--proc-root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "GPUs:      unknown (NVML not available)" in out
    assert "No pipeline found. Give --topology-file" in out


def test_human_table(fake_nvml, capsys):
    t = fake_nvml("sglang_pp8")
    assert main(["topology", "--proc-root", t.root]) == 0
    out = capsys.readouterr().out
    assert "pipeline sglang:30000: sglang, PP8 (pid 4100)" in out
    assert "      7  7   NVIDIA RTX PRO 6000" in out
    assert "flow:  [0] -> [1] -> [2]" in out
    assert "cuda_graph=off" in out and "pp_async_batch_depth=0" in out
    assert "found by:  NVML's GPU processes" in out


@pytest.mark.parametrize(
    "name",
    ["sglang_pp8", "sglang_pp4_tp2_uuid", "sglang_two_engines", "vllm_pp4_tp2", "trtllm_pp2_tp2"],
)
@pytest.mark.parametrize("as_json", [True, False])
def test_no_secret_in_any_output(fake_nvml, capsys, caplog, name, as_json):
    t = fake_nvml(name)
    with caplog.at_level(logging.DEBUG):
        rc = main(
            [
                "--log-level",
                "debug",
                "topology",
                "--proc-root",
                t.root,
                *(["--json"] if as_json else []),
            ]
        )
    out = capsys.readouterr()
    assert rc == 0
    assert_no_secret(out.out + out.err)
    assert_no_secret(caplog.text)


SGLANG_PP2 = (
    "python -m sglang.launch_server --model-path M --pp-size 2 "
    "--pp-async-batch-depth 1 --cuda-graph-max-bs 8"
)


@pytest.mark.parametrize(
    ("version", "refused", "accepted"),
    [
        # --pp-async-batch-depth arrived in 0.5.7; --cuda-graph-max-bs was split by 0.5.20.
        ("0.5.6", "--pp-async-batch-depth", "--cuda-graph-max-bs"),
        ("0.5.20", "--cuda-graph-max-bs", "--pp-async-batch-depth"),
    ],
)
def test_engine_version_reads_flags_as_that_version_does(
    no_nvml, capsys, version, refused, accepted
):
    rc, doc, _ = run_json(capsys, "--engine-cmdline", SGLANG_PP2, "--engine-version", version)
    assert rc == 0
    engine = doc["pipelines"][0]["engine"]
    assert engine["version"] == version
    assert any(refused in p for p in engine["problems"]), engine["problems"]
    assert not any(accepted in p for p in engine["problems"]), engine["problems"]
    assert main(["topology", "--engine-cmdline", SGLANG_PP2, "--engine-version", version]) == 0
    text = capsys.readouterr().out
    assert f"version: {version}" in text
    assert f"refused by its parser: sglang {version}" in text and refused in text


def test_without_engine_version_no_flag_is_said_to_be_refused(no_nvml, capsys):
    rc, doc, _ = run_json(capsys, "--engine-cmdline", SGLANG_PP2)
    engine = doc["pipelines"][0]["engine"]
    assert rc == 0 and engine["version"] is None and engine["problems"] == []


def test_bad_engine_version_exits_2_naming_the_option(no_nvml, capsys):
    assert main(["topology", "--engine-cmdline", SGLANG_PP2, "--engine-version", "new"]) == 2
    assert "--engine-version: not a version: 'new'" in capsys.readouterr().err


def test_engine_version_without_a_command_line_exits_2(no_nvml, capsys, tmp_path):
    assert main(["topology", "--proc-root", str(tmp_path), "--engine-version", "0.5.6"]) == 2
    assert "give both" in capsys.readouterr().err
