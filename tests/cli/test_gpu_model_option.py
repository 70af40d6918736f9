"""`analyze --gpu-model`: a recording that names no GPU read as one that names it.

A simulated pp8-serialized run on A100s (whose NVML power reading is an instant,
not a 1 s mean) is written as it is and without the GPUs' names. Read without a
name, the power reading is taken for a 1 s average, the waiting draw's fit
resolves less and the bubble range is wider; --gpu-model gives back what the
named file gives.
"""

from __future__ import annotations

import json

import pytest

from bubblewatch.cli.main import main

A100 = "NVIDIA A100-SXM4-80GB"
RANGE = ("bubble_ratio", "bubble_ratio_low", "bubble_ratio_high", "concurrency_high")


def _unnamed(src, dst, *, keep_limit: bool) -> None:
    lines = src.read_text().splitlines()
    header = json.loads(lines[0])
    for g in header["gpus"]:
        g["name"] = ""
        if not keep_limit:
            g.pop("power_limit_w", None)
    dst.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu_model")
    named = d / "named.jsonl"
    sets = [f"hardware.gpu.name={A100}", "hardware.gpu.power_limit_w=400"]
    sets += ["hardware.gpu.idle_power_w=55", "hardware.gpu.spin_power_w=110"]
    sets += ["hardware.gpu.peak_power_w=400"]
    argv = ["simulate", "pp8-serialized", "--duration", "40", "-o", str(named)]
    assert main(argv + [a for s in sets for a in ("--set", s)]) == 0
    _unnamed(named, d / "limit.jsonl", keep_limit=True)  # the limit stays: the reading alone
    _unnamed(named, d / "bare.jsonl", keep_limit=False)
    fine = d / "fine.jsonl"  # 1,600 GPU samples: more than the least --window-samples (1,000)
    assert (
        main([*argv[:-1], str(fine), "--interval", "0.2"] + [a for s in sets for a in ("--set", s)])
        == 0
    )
    _unnamed(fine, d / "fine_bare.jsonl", keep_limit=False)
    return {p.stem: str(p) for p in d.glob("*.jsonl")}


def _analyze(capsys, *argv):
    capsys.readouterr()
    assert main(["analyze", *argv, "--json"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err


def test_the_model_makes_an_unnamed_a100_read_as_an_instant(capsys, traces) -> None:
    named, _ = _analyze(capsys, traces["named"])
    plain, _ = _analyze(capsys, traces["limit"])
    given, err = _analyze(capsys, traces["limit"], "--gpu-model", A100)
    ev_n, ev_p, ev_g = named["evidence"], plain["evidence"], given["evidence"]
    # Read as a 1 s mean (no name), the range is wider than the named file's ...
    assert ev_p["bubble_ratio_low"] < ev_n["bubble_ratio_low"] - 0.1
    # ... and with the model given, it is the named file's range, the same limit (the file's).
    assert {k: ev_g[k] for k in RANGE} == {k: ev_n[k] for k in RANGE}
    assert ev_g["power_reference_source"] == ev_n["power_reference_source"] == "file"
    assert ev_g["gpu_model_from"] == "option"
    assert "gpu_model_from" not in ev_n and "gpu_model_from" not in ev_p
    assert err == ""


def test_the_model_gives_its_default_limit(capsys, traces) -> None:
    plain, _ = _analyze(capsys, traces["bare"])
    given, _ = _analyze(capsys, traces["bare"], "--gpu-model", "A100-SXM4-80GB")
    assert plain["evidence"]["power_reference_w"] is None
    assert given["evidence"]["power_reference_w"] == 400.0
    assert given["evidence"]["power_reference_source"] == "gpu_model"
    width = {
        k: d["evidence"]["bubble_ratio_high"] - d["evidence"]["bubble_ratio_low"]
        for k, d in (("plain", plain), ("given", given))
    }
    assert width["given"] < width["plain"] - 0.1


def test_a_named_recording_keeps_its_model_and_says_so(capsys, traces) -> None:
    named, _ = _analyze(capsys, traces["named"])
    other, err = _analyze(capsys, traces["named"], "--gpu-model", "NVIDIA H100 80GB HBM3")
    assert err.count("warning: --gpu-model 'NVIDIA H100 80GB HBM3' is not used") == 1
    assert "GPU(s) 0-7" in err and A100 in err
    ev = other["evidence"]
    assert ev.pop("gpu_model_from") == "recording"
    assert ev == named["evidence"]
    # The same model, another spelling: no word.
    _, err = _analyze(capsys, traces["named"], "--gpu-model", "A100 SXM4 40GB")
    assert err == ""


def test_long_recordings_and_compare_take_it_too(capsys, traces) -> None:
    # Read in pieces and diagnosed window by window: every window named, said once.
    argv = ["--window-samples", "1000", "--window", "20"]
    out, err = _analyze(capsys, traces["fine"], *argv, "--gpu-model", "NVIDIA H100 80GB HBM3")
    assert out["recording"]["analysed_in_windows"] and len(out["recording"]["windows"]) == 2
    assert err.count("is not used for GPU(s)") == 1
    assert out["evidence"]["gpu_model_from"] == "recording"
    out, _ = _analyze(capsys, traces["fine_bare"], *argv, "--gpu-model", A100)
    assert out["recording"]["analysed_in_windows"]
    assert out["evidence"]["gpu_model_from"] == "option"
    assert out["evidence"]["power_reference_source"] == "gpu_model"
    # compare reads two recordings with one option: said once for both.
    capsys.readouterr()
    h100 = ["--gpu-model", "NVIDIA H100 80GB HBM3", "--json"]
    assert main(["compare", traces["named"], traces["named"], *h100]) == 0
    assert capsys.readouterr().err.count("is not used for GPU(s)") == 1


@pytest.mark.parametrize("command", ["analyze", "compare", "fleet"])
def test_an_unknown_model_exits_2_naming_known_ones(capsys, traces, command) -> None:
    argv = {
        "analyze": [traces["bare"]],
        "compare": [traces["bare"], traces["bare"]],
        "fleet": ["--prometheus", "http://127.0.0.1:9"],
    }[command]
    with pytest.raises(SystemExit) as e:
        main([command, *argv, "--gpu-model", "Some Future GPU"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--gpu-model: unknown GPU model 'Some Future GPU'" in err
    assert "'NVIDIA A100-SXM4-80GB'" in err
    assert "Traceback" not in err


def test_the_text_report_says_where_the_model_came_from(capsys, traces) -> None:
    def report(*argv):
        capsys.readouterr()
        assert main(["analyze", *argv, "--color", "never"]) == 0
        return capsys.readouterr().out

    line = "GPU model: from --gpu-model (the recording names none)"
    assert line in report(traces["bare"], "--gpu-model", A100)
    assert "GPU model:" not in report(traces["bare"])
    assert "GPU model:" not in report(traces["named"], "--gpu-model", A100)


def test_a_bare_nvidia_smi_capture_of_a100s_is_judged_against_their_limit(capsys, tmp_path) -> None:
    # timestamp, index, power.draw, utilization.gpu: no name, no limit, no SM activity.
    path = tmp_path / "bare.csv"
    sets = [f"hardware.gpu.name={A100}", "hardware.gpu.power_limit_w=400"]
    sets += ["hardware.gpu.idle_power_w=55", "hardware.gpu.spin_power_w=110"]
    argv = ["simulate", "pp8-serialized", "--duration", "40", "--format", "nvidia-smi-bare"]
    capsys.readouterr()
    assert main([*argv, "-o", str(path), "--json"] + [a for s in sets for a in ("--set", s)]) == 0
    truth = json.loads(capsys.readouterr().out)["truth"]["stages"]
    true_bubble = 1.0 - sum(s["busy_ratio"] for s in truth) / len(truth)
    plain, _ = _analyze(capsys, str(path), "--pp-size", "8")
    given, _ = _analyze(capsys, str(path), "--pp-size", "8", "--gpu-model", A100)
    ev_p, ev_g = plain["evidence"], given["evidence"]
    # Power scaled to the window's own range misses the bubble; against 400 W it is found.
    assert not ev_p["bubble_ratio_low"] <= true_bubble <= ev_p["bubble_ratio_high"]
    assert ev_g["bubble_ratio_low"] <= true_bubble <= ev_g["bubble_ratio_high"]
    assert ev_g["power_reference_w"] == 400.0 and ev_p["power_reference_w"] is None
    assert given["verdict"] == "serialized" != plain["verdict"]
