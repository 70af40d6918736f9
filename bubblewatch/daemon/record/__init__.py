"""Recording the samples to rotated trace files, and the recorder's metrics."""
