"""Source adapters: opening NVML or the simulator, and polling the engines' endpoints."""
