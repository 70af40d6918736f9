"""A fake libnvidia-ml.so.1 (C) and the helpers that build it and feed it timelines."""
