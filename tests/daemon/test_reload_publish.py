"""The daemon's pure parts: what a reload changes, the status line and the published state."""

from __future__ import annotations

from dataclasses import replace

from bubblewatch.daemon.config.file import DaemonConfig, load_config
from bubblewatch.daemon.loop.publish import analysis_state, status_key, status_text
from bubblewatch.daemon.loop.reload import diff_configs
from bubblewatch.daemon.loop.reloads import ReloadState
from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineResult
from bubblewatch.detect.types import Diagnosis, Verdict
from bubblewatch.model.topology import Topology
from bubblewatch.rules import Recommendation, Severity


def config(**flags: str) -> DaemonConfig:
    return load_config(None, {f"--{k}": v for k, v in flags.items()}, env={})


def test_same_config_changes_nothing() -> None:
    diff = diff_configs(config(), config(), simulated=False)
    assert diff.cfg == config()
    assert diff.needs_restart == ()
    assert not (diff.logging or diff.sampling or diff.ring or diff.alerting or diff.topology)
    assert diff.scenario is None and not diff.source_kind


def test_listen_address_and_path_need_a_restart_and_keep_their_old_values() -> None:
    """Regression: the new values went into the configuration in force, though the endpoint
    still served the old ones, so the next reload of the same file saw no change at all."""
    new = config(**{"web.listen-address": "127.0.0.1:1", "web.telemetry-path": "/m",
                    "sampling.interval": "2s"})  # fmt: skip
    diff = diff_configs(config(), new, simulated=False)
    assert diff.needs_restart == ("web.listen_address", "web.telemetry_path")
    assert diff.cfg == replace(new, web=config().web)  # the rest applies
    again = diff_configs(diff.cfg, new, simulated=False)
    assert again.needs_restart == diff.needs_restart and not again.sampling


def test_reload_state_counts_each_result_and_says_what_is_not_in_force() -> None:
    state = ReloadState()
    assert dict(state.counts) == {"applied": 0, "refused": 0, "invalid": 0}
    assert state.status_note() == ""
    refused = replace(state, counts=state.counted("refused"), restart_required=("record",))
    assert dict(refused.counts)["refused"] == 1
    assert refused.status_note() == "; restart required for record"
    invalid = replace(refused, ok=False, counts=refused.counted("invalid"))
    assert dict(invalid.counts) == {"applied": 0, "refused": 1, "invalid": 1}
    assert "last reload invalid" in invalid.status_note()


def test_history_resizes_the_ring_and_sets_the_interval_window_only_resizes() -> None:
    history = diff_configs(config(), config(**{"sampling.history": "20m"}), simulated=False)
    assert history.sampling and history.ring
    window = diff_configs(config(), config(**{"analysis.window": "2m"}), simulated=False)
    assert window.ring and not window.sampling


def test_log_alerting_and_topology_changes_are_seen() -> None:
    diff = diff_configs(
        config(),
        config(
            **{
                "log.level": "debug",
                "alerting.repeat-interval": "1h",
                "topology.rediscover-interval": "5m",
            }
        ),
        simulated=False,
    )
    assert diff.logging and diff.alerting and diff.topology


def test_scenario_switches_only_on_a_simulated_daemon() -> None:
    old = config(simulate="pp8-serialized")
    new = config(simulate="pp8-async")
    sim = diff_configs(old, new, simulated=True)
    assert sim.scenario == "pp8-async" and not sim.source_kind and sim.cfg == new
    # From real GPUs to a scenario, or from a scenario to none: a restart, the old one stays.
    to_sim = diff_configs(config(), new, simulated=False)
    assert to_sim.scenario is None and to_sim.source_kind
    assert to_sim.cfg.simulate is None and to_sim.cfg == replace(new, simulate=None)
    assert to_sim.needs_restart == ("simulate",)
    off = diff_configs(old, config(), simulated=True)
    assert off.scenario is None and off.source_kind and off.cfg.simulate == "pp8-serialized"


def result(
    pid: str, verdict: Verdict, rules: tuple[str, ...] = (), topo: Topology | None = None
) -> PipelineResult:
    diag = Diagnosis(verdict, 0.875, (), (), 10.0, 40, evidence={"pp_size": 2})
    recs = tuple(Recommendation(r, Severity.WARNING, "") for r in rules)
    return PipelineResult(Pipeline(pid, topo), diag, recs, 5.0)


def test_status_line_for_one_and_for_several_pipelines() -> None:
    one = [result("h/sglang:30000", Verdict.SERIALIZED, ("PpAsyncDepth",))]
    assert status_text(one) == "h/sglang:30000: serialized (0.88); 1 recommendation(s)"
    many = [
        result("a", Verdict.HEALTHY),
        result("b", Verdict.SERIALIZED),
        result("c", Verdict.HEALTHY),
    ]
    assert status_text(many) == "3 pipelines: 2 healthy, 1 serialized"


def test_status_key_changes_with_the_firing_rules_not_the_confidence() -> None:
    a = [result("p", Verdict.SERIALIZED)]
    b = [result("p", Verdict.SERIALIZED, ("PpAsyncDepth",))]
    assert status_key(a) != status_key(b)
    assert status_key(a) == status_key([result("p", Verdict.SERIALIZED)])


def test_published_stages_and_placement_start_at_the_first_stage() -> None:
    topo = Topology(((0, 1), (2, 3)))
    res = [result("p", Verdict.SERIALIZED, ("PpAsyncDepth",), topo)]
    st = analysis_state(res, first_stage=4, outcomes={})
    assert st.done
    assert dict(st.placement) == {0: ("p", 4), 1: ("p", 4), 2: ("p", 5), 3: ("p", 5)}
    assert [(r.pipeline, r.rule, r.severity) for r in st.recommendations] == [
        ("p", "PpAsyncDepth", "warning")
    ]
    assert st.changes == ()
    local = analysis_state(res, first_stage=0, outcomes={})
    assert dict(local.placement)[3] == ("p", 1)
