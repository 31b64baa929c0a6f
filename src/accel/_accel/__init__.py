"""The private parts of :class:`accel.Accelerator`, one concern per module.

- :mod:`accel._accel.setup`: rank, precision, device and process group, each from the
  argument, else the launcher's variable, else the configuration.
- :mod:`accel._accel.data`: DataLoaders sharded over the ranks, resumable mid-epoch.
- :mod:`accel._accel.rng`: every RNG's state (Python, torch, CUDA, numpy) as tensors,
  captured into and restored from each rank's checkpoint part.
- :mod:`accel._accel.scaling`: fp16's ``optimizer.step()`` through the GradScaler.
- :mod:`accel._accel.metrics`: the run's metrics file (and TensorBoard events).
"""
