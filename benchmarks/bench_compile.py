"""Framework caches in the workspace: compile time of a second ``accel launch`` / the first.

    python benchmarks/bench_compile.py [--launches 2]

A fresh project launches (``accel launch -n 1``) a script that ``torch.compile``s a small
model and times its first call (compile + run). ``accel launch`` points
``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` into
``.accelerate/cache/frameworks/``, so the second launch finds the first one's compiled
kernels there (and keeps finding them after a reboot, unlike the default under /tmp).
Goal: second / first <= 0.50. CPU Inductor needs a C compiler (gcc).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import accel_exe

SCRIPT = """
import json, os, time, torch
model = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64), torch.nn.LayerNorm(64)
)
compiled = torch.compile(model)
x = torch.randn(32, 64)
start = time.perf_counter()
with torch.no_grad():
    compiled(x)
print("RESULT " + json.dumps({
    "compile_s": time.perf_counter() - start,
    "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
}), flush=True)
"""


def launch(accel: str, project: Path, env: dict[str, str]) -> dict[str, object]:
    out = subprocess.run(
        [accel, "launch", "-n", "1", "compile_me.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    line = next(ln for ln in out.stdout.splitlines() if "RESULT " in ln)
    return dict(json.loads(line.split("RESULT ", 1)[1]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int, default=2)
    args = parser.parse_args()
    accel = accel_exe()
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        (project / "compile_me.py").write_text(SCRIPT)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ACCEL_", "TORCHINDUCTOR_", "TRITON_"))
        }
        env["HOME"] = scratch
        subprocess.run(
            [accel, "config", "--default"], cwd=project, env=env, check=True, capture_output=True
        )
        results = [launch(accel, project, env) for _ in range(args.launches)]
        size = sum(
            p.stat().st_size
            for p in (project / ".accelerate/cache/frameworks").rglob("*")
            if p.is_file()
        )
    first = float(results[0]["compile_s"])  # type: ignore[arg-type]
    print(
        f"\ntorch.compile of a small MLP under accel launch -n 1 (cache: {results[0]['inductor_cache']})"
    )
    for i, r in enumerate(results, 1):
        secs = float(r["compile_s"])  # type: ignore[arg-type]
        print(f"  launch {i}: first call {secs:7.2f} s   ratio to launch 1: {secs / first:.2f}")
    ratio = float(results[-1]["compile_s"]) / first  # type: ignore[arg-type]
    print(f"  goal: launch 2 / launch 1 <= 0.50  {'ok' if ratio <= 0.5 else 'MISSED'}")
    print(f"  framework caches in the workspace: {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
