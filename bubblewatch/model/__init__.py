"""The telemetry model: metrics, GPU inventory, topology, samples and recordings."""

from bubblewatch.model.inventory import GpuInfo
from bubblewatch.model.metrics import METRICS, Metric, MetricSpec
from bubblewatch.model.recording import GpuSeries, LoadSeries, Recording, RecordingBuilder
from bubblewatch.model.samples import Event, LoadSample, Sample
from bubblewatch.model.topology import Topology, TopologyError

__all__ = [
    "METRICS",
    "Event",
    "GpuInfo",
    "GpuSeries",
    "LoadSample",
    "LoadSeries",
    "Metric",
    "MetricSpec",
    "Recording",
    "RecordingBuilder",
    "Sample",
    "Topology",
    "TopologyError",
]
