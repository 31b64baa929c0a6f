"""Keep every rank's GPU busy for SECONDS with matmuls (for the NVML telemetry test)."""

import os
import sys
import time

import torch

seconds = float(sys.argv[1])
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(device)
a = torch.randn(4096, 4096, device=device)
held = torch.empty(256 * 2**20, dtype=torch.uint8, device=device)  # 256 MiB the sampler sees
end = time.monotonic() + seconds
while time.monotonic() < end:
    a = torch.tanh(a @ a)
    torch.cuda.synchronize(device)
print(f"rank {os.environ['RANK']} busy on {device}: {held.numel() >> 20} MiB held", flush=True)
