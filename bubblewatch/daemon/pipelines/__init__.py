"""Pipeline tracking: discovering pipelines, analysing their windows, watching changes."""
