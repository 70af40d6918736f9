"""The generated flag tables say what each engine release accepts (facts from the wheels)."""

from __future__ import annotations

import pytest

from bubblewatch.engines.flagtable import table_for, tabulated_versions
from bubblewatch.engines.versions import normalise_version, version_key


def test_version_order_follows_the_engines_releases():
    vs = ["0.5.7", "0.5.6.post2", "0.5.6", "0.5.7rc1", "0.5.7.dev3", "0.5.7.post1", "0.11.1rc2"]
    assert sorted(vs, key=version_key) == [
        "0.5.6",
        "0.5.6.post2",
        "0.5.7.dev3",
        "0.5.7rc1",
        "0.5.7",
        "0.5.7.post1",
        "0.11.1rc2",
    ]
    assert normalise_version("v0.5.11") == "0.5.11"
    assert normalise_version("latest") is None


def test_the_tables_cover_the_released_versions():
    sg = tabulated_versions("sglang")
    assert sg[0] == "0.4.0" and sg[-1] == "0.5.23" and "0.5.6.post2" in sg
    assert "0.8.5" in tabulated_versions("vllm")


@pytest.mark.parametrize(
    ("version", "accepted"),
    [("0.5.6.post2", False), ("0.5.7", True), ("0.5.11", True), ("0.5.23", True)],
)
def test_async_batch_depth_exists_from_0_5_7(version, accepted):
    t = table_for("sglang", version)
    assert t is not None and t.exact
    assert t.accepts("--pp-async-batch-depth") is accepted
    assert t.accepts("--pp-max-micro-batch-size")  # since 0.5.3.post1


def test_cuda_graph_max_bs_is_ambiguous_once_only_the_per_phase_flags_exist():
    assert table_for("sglang", "0.5.19").accepts("--cuda-graph-max-bs")  # deprecated alias
    res = table_for("sglang", "0.5.20").resolve("--cuda-graph-max-bs")
    assert not res.ok and "ambiguous" in (res.problem or "")
    assert table_for("sglang", "0.5.20").accepts("--cuda-graph-max-bs-decode")


def test_deprecations_name_their_replacement():
    t = table_for("sglang", "0.5.23")
    graphs = t.resolve("--disable-cuda-graph").spec
    assert graphs is not None and graphs.deprecated and "cuda-graph-backend" in graphs.replaced_by
    dpa = t.resolve("--enable-dp-attention").spec
    assert dpa is not None and dpa.deprecated and dpa.replaced_by.startswith("--attn-dp-size")
    assert not table_for("sglang", "0.5.13").resolve("--disable-cuda-graph").spec.deprecated


def test_abbreviations_resolve_like_argparse():
    t = table_for("sglang", "0.5.11")
    assert t.resolve("--tp").spec.dest in ("tp_size", "tensor_parallel_size")
    assert "ambiguous" in (t.resolve("--pp").problem or "")


def test_between_and_beyond_the_tables():
    dev = table_for("sglang", "0.5.12.dev3")
    assert dev is not None and dev.table_version == "0.5.11" and not dev.exact
    assert "judged by the table of 0.5.11" in dev.note
    assert table_for("sglang", "0.3.6") is None
    assert table_for("sglang", None) is None
    assert table_for("sglang", "not-a-version") is None
    newer = table_for("sglang", "0.6.0")
    assert newer is not None and newer.table_version == "0.5.23"


def test_vllm_reads_underscores_as_dashes_and_spans_come_with_their_source():
    t = table_for("vllm", "0.11.0")
    assert t.resolve("--tensor_parallel_size").spec.dest == "tensor_parallel_size"
    assert t.resolve("--no-enforce-eager").ok
    assert not t.accepts("--device-ids")  # added in 0.28
    spec = table_for("vllm", "0.33.0").resolve("--device-ids").spec
    assert spec is not None and spec.where.startswith("vllm/engine/arg_utils.py:")
