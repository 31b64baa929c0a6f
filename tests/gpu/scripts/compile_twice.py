"""torch.compile a small model on CUDA (Inductor -> Triton) and time its first call."""

import json
import os
import time

import torch

model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256), torch.nn.LayerNorm(256)
).cuda()
compiled = torch.compile(model)
x = torch.randn(64, 256, device="cuda")
start = time.perf_counter()
with torch.no_grad():
    compiled(x)
torch.cuda.synchronize()
caches = {name: os.environ.get(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
print("RESULT " + json.dumps({"first_call_s": time.perf_counter() - start, **caches}), flush=True)
