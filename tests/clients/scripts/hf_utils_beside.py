"""Accelerate's own helpers beside accel's Accelerator, as ported scripts keep them:
``accelerate.utils`` collectives, ``accelerate.logging`` and ``PartialState``. Writes
what each rank saw to OUT/rank-N.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from accelerate.logging import get_logger
from accelerate.state import PartialState
from accelerate.utils import gather, gather_object
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator

logger = get_logger(__name__)  # before the Accelerator, as transformers' scripts do

acc = Accelerator()
logger.info(acc.state, main_process_only=False)  # raised: "initialize the accelerate state"
loader = acc.prepare(DataLoader(TensorDataset(torch.arange(8)), batch_size=2))
seen = [int(x) for (batch,) in loader for x in batch]
state = PartialState()
report = {
    "objects": sorted(gather_object(seen)),
    "tensors": sorted(gather(torch.tensor(seen)).tolist()),
    "processes": state.num_processes,
    "index": state.process_index,
    "type": str(state.distributed_type),
}
Path(sys.argv[1], f"rank-{acc.rank}.json").write_text(json.dumps(report))
acc.end()
