"""The framework cache variables, as a worker started by ``accel launch`` sees them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = """
import json, os
names = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "HF_HOME", "TORCH_HOME")
print("ENV " + json.dumps({n: os.environ.get(n) for n in names}), flush=True)
"""


def worker_env(project: Path, accel_exe: list[str], env: dict[str, str]) -> dict[str, str]:
    (project / "show_env.py").write_text(SCRIPT)
    out = subprocess.run(
        [*accel_exe, "launch", "-n", "1", "show_env.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if "ENV " in ln)
    return dict(json.loads(line.split("ENV ", 1)[1]))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_launched_worker_gets_workspace_caches_unless_the_user_set_them(
    project: Path, accel_exe: list[str]
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR", "TRITON"))},
        "TRITON_CACHE_DIR": str(project / "my-triton"),
        "ACCEL_CACHE_FRAMEWORK_CACHES": "inductor,triton,torch_hub",
    }
    env.pop("HF_HOME", None)
    env.pop("TORCH_HOME", None)
    seen = worker_env(project, accel_exe, env)
    frameworks = project / ".accelerate" / "cache" / "frameworks"
    assert seen == {
        "TORCHINDUCTOR_CACHE_DIR": str(frameworks / "inductor"),
        "TRITON_CACHE_DIR": str(project / "my-triton"),  # the user's own value wins
        "HF_HOME": None,  # opt-in, not chosen here
        "TORCH_HOME": str(frameworks / "torch_hub"),
    }
