"""The loop: sampling, windows, analysis, publishing, alerts and reloads on a schedule."""
