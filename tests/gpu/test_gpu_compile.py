"""torch.compile on CUDA fills the workspace's Inductor and Triton caches; a second launch
reuses them instead of compiling again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuutil import GPU, SCRIPTS, accel_run, failure

pytestmark = GPU


def _kernels(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def _compile(project: Path) -> dict[str, object]:
    done = accel_run(project, "launch", "-n", "1", str(SCRIPTS / "compile_twice.py"), timeout=240)
    assert done.returncode == 0, failure(done)
    (line,) = [x for x in done.stdout.splitlines() if "RESULT " in x]
    result: dict[str, object] = json.loads(line.split("RESULT ", 1)[1])
    return result


@pytest.mark.timeout(300)
def test_a_second_launch_compiles_from_the_workspace_caches(project: Path) -> None:
    pytest.importorskip("triton", reason="torch.compile on CUDA needs triton")
    frameworks = project / ".accelerate" / "cache" / "frameworks"
    cold = _compile(project)
    assert str(cold["TRITON_CACHE_DIR"]).startswith(str(frameworks))
    assert str(cold["TORCHINDUCTOR_CACHE_DIR"]).startswith(str(frameworks))
    triton = _kernels(Path(str(cold["TRITON_CACHE_DIR"])))
    assert triton, "no Triton kernel was cached in the workspace"
    warm = _compile(project)
    assert _kernels(Path(str(cold["TRITON_CACHE_DIR"]))) == triton  # nothing compiled again
    print(f"first call: cold {cold['first_call_s']:.2f}s, warm {warm['first_call_s']:.2f}s")
