"""The private parts of :class:`accel.Accelerator`, one concern per module.

- :mod:`accel._accel.setup`: rank, precision, device and process group, each from the
  argument, else the launcher's variable, else the configuration.
- :mod:`accel._accel.data`: DataLoaders sharded over the ranks, resumable mid-epoch.
- :mod:`accel._accel.rng`: every RNG's state (Python, torch, CUDA, numpy) as tensors,
  captured into and restored from each rank's checkpoint part.
- :mod:`accel._accel.scaling`: fp16's ``optimizer.step()`` through the GradScaler.
- :mod:`accel._accel.metrics`: the run's metrics file (and TensorBoard events).

Hugging Face Accelerate's API on the same object (docs/worker-api.md's table):

- :mod:`accel._accel.hfargs`: its constructor arguments, read; what accel does not run, refused.
- :mod:`accel._accel.hfapi`: processes, collectives, decorators, accumulation, trackers.
- :mod:`accel._accel.ops`: the collectives themselves (gather, reduce, pad, split).
- :mod:`accel._accel.hfdata`: its data sharding, resumable mid-epoch.
- :mod:`accel._accel.accumulate`: gradient accumulation and its scheduler stepping.
- :mod:`accel._accel.hfstate`: ``save_state(folder)``/``load_state(folder)`` on the store,
  ``save_model``, ``save``, hooks.
- :mod:`accel._accel.trackers`: ``log_with`` (TensorBoard, tracker objects).
"""
