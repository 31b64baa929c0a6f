"""FSDP2 for ``Accelerator.prepare()``: settings, sharding, and state for checkpoints.

- :mod:`.settings` (pure, no torch): what to shard and how, from the ``launch.fsdp*``
  config keys or the Hugging Face ``ACCELERATE_USE_FSDP`` / ``FSDP_*`` variables, and
  the variables the launcher gives its workers.
- :mod:`.shard`: ``fully_shard`` per the wrapping policy; optimizers made before
  ``prepare()`` are moved onto the sharded parameters.
- :mod:`.state`: sharded model/optimizer state for ``save_state``/``load_state`` (through
  ``torch.distributed.checkpoint.state_dict``) and the full state dict for export.
- :mod:`.compat`: what differs between the supported torch releases.

The accelerator keeps small hooks into these modules; nothing here imports torch at
module level except :mod:`.shard`, :mod:`.state` and :mod:`.compat`, which the
accelerator imports only when FSDP is on.
"""
