"""Print, as one JSON line per rank, what Hugging Face Accelerate makes of its launcher's
variables: the process group its ``Accelerator`` joins, and the FSDP plugin its
``Accelerator`` builds from the ``FSDP_*`` variables (built here directly: Accelerate
builds it only on an accelerator device, and these tests run on the CPU)."""

import json
import os
import sys

from accelerate import Accelerator, FullyShardedDataParallelPlugin

acc = Accelerator()
plugin = (
    FullyShardedDataParallelPlugin() if os.environ.get("ACCELERATE_USE_FSDP") == "true" else None
)
seen = {
    "rank": acc.process_index,
    "world": acc.num_processes,
    "distributed_type": str(acc.distributed_type),
    "cpu_affinity": os.environ.get("ACCELERATE_CPU_AFFINITY"),
}
if plugin is not None:
    seen.update(
        fsdp_version=plugin.fsdp_version,
        state_dict_type=str(plugin.state_dict_type),
        reshard_after_forward=plugin.reshard_after_forward,
        transformer_cls_names_to_wrap=plugin.transformer_cls_names_to_wrap,
        auto_wrap_policy=getattr(plugin.auto_wrap_policy, "__name__", str(plugin.auto_wrap_policy)),
        cpu_ram_efficient_loading=plugin.cpu_ram_efficient_loading,
        sync_module_states=plugin.sync_module_states,
        activation_checkpointing=plugin.activation_checkpointing,
        min_num_params=plugin.min_num_params,
    )
# One write per line: the workers may share one pipe (see the test's reader).
sys.stdout.write("PROBE " + json.dumps(seen, sort_keys=True) + "\n")
sys.stdout.flush()
# Every rank joined before any leaves: gloo's full mesh can be whole on rank 0 while rank
# 1 still connects, and a rank 0 that ends its group then fails rank 1's
# init_process_group with "Connection closed by peer" (CI65, once).
acc.wait_for_everyone()
acc.end_training()
