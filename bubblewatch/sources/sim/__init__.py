"""The pipeline simulator: a faithful stand-in for GPUs running a pipelined LLM engine.

    sc = load_scenario("pp8-serialized")
    res = simulate(sc, duration_s=60.0, seed=0)
    rec = observe(res, interval_s=1.0)

See docs/simulator.md for the model and its assumptions.
"""

from bubblewatch.sources.sim.errors import ScenarioError
from bubblewatch.sources.sim.observe import observe
from bubblewatch.sources.sim.result import ReplicaTruth, SimResult, StageTruth, Truth
from bubblewatch.sources.sim.scenario import list_scenarios, load_scenario
from bubblewatch.sources.sim.simulate import simulate
from bubblewatch.sources.sim.spec import Scenario
from bubblewatch.sources.sim.timeline import FIELDS, Timeline, TimelineGpu
from bubblewatch.sources.sim.training_spec import TrainingScenario

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
    "list_scenarios",
    "load_scenario",
    "observe",
    "simulate",
]
