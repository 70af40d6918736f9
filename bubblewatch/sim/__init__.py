"""The pipeline simulator: a faithful stand-in for GPUs running a pipelined LLM engine.

    sc = load_scenario("pp8-serialized")
    res = simulate(sc, duration_s=60.0, seed=0)
    rec = observe(res, interval_s=1.0)

See docs/simulator.md for the model and its assumptions.
"""

from bubblewatch.sim.errors import ScenarioError
from bubblewatch.sim.observe import observe
from bubblewatch.sim.result import ReplicaTruth, SimResult, StageTruth, Truth
from bubblewatch.sim.scenario import apply_overrides, list_scenarios, load_scenario
from bubblewatch.sim.simulate import simulate
from bubblewatch.sim.spec import Scenario
from bubblewatch.sim.timeline import FIELDS, Timeline, TimelineGpu
from bubblewatch.sim.training_spec import TrainingScenario

__all__ = [
    "FIELDS",
    "ReplicaTruth",
    "Scenario",
    "ScenarioError",
    "SimResult",
    "StageTruth",
    "Timeline",
    "TimelineGpu",
    "TrainingScenario",
    "Truth",
    "apply_overrides",
    "list_scenarios",
    "load_scenario",
    "observe",
    "simulate",
]
