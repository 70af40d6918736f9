"""A recording's engine load as rows (LoadSample), the way a trace writer or ring takes it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from bubblewatch.model.recording import Recording
from bubblewatch.model.samples import LoadSample


def load_samples(recording: Recording) -> Iterator[LoadSample]:
    """Each load row in time order, NaN read as unknown (None)."""
    load = recording.load
    cols = (load.t_s, load.running, load.queued, load.micro_batch_or_nan())
    for t, r, q, mb in zip(*cols, strict=True):
        yield LoadSample(
            float(t),
            None if np.isnan(r) else float(r),
            None if np.isnan(q) else float(q),
            None if np.isnan(mb) else float(mb),
        )
