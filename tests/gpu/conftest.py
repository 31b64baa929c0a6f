"""tests/gpu: CUDA runs of the launcher, the Accelerator, telemetry, checkpoints, caches."""
