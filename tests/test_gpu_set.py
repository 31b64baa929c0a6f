"""The GPU test set on a machine without a GPU: collected with -m gpu, skipped cleanly,
and its script and summary work (tests/gpu itself runs on GPU machines only)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests_paths import ROOT

GPU_TESTS = ROOT / "tests" / "gpu"
SCRIPT = ROOT / "scripts" / "gpu-check.sh"


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_gpu_test_is_collected_by_the_gpu_marker() -> None:
    # one collection: pytest's summary counts what the marker left out ("N/M tests
    # collected (K deselected)"), so "N tests collected" alone means every test is marked
    marked = _pytest("--collect-only", "-q", "-m", "gpu", str(GPU_TESTS))
    assert marked.returncode == 0, marked.stdout + marked.stderr
    ids = [line for line in marked.stdout.splitlines() if "::" in line]
    assert len(ids) >= 5
    summary = marked.stdout.strip().splitlines()[-1]
    assert re.fullmatch(rf"{len(ids)} tests? collected in [\d.]+s", summary), summary
    covered = " ".join(ids)
    for topic in ("launch_auto", "resume", "fp16", "nvml", "checkpoints", "compile", "mismatch"):
        assert topic in covered.lower().replace("more_workers_than_gpus", "mismatch"), topic


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_without_cuda_the_set_skips_cleanly() -> None:
    if _has_cuda():
        pytest.skip("this machine has a GPU: the set runs for real here")
    done = _pytest("-q", "-rs", "-m", "gpu", str(GPU_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^\d+ skipped", done.stdout.splitlines()[-1])
    assert "needs a CUDA GPU" in done.stdout and "Error" not in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_gpu_check_script_is_valid_bash_and_refuses_a_machine_without_cuda() -> None:
    assert os.access(SCRIPT, os.X_OK)
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
    if _has_cuda():
        pytest.skip("this machine has a GPU: the script would run the set")
    done = subprocess.run(
        [str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gpu-check: torch sees no CUDA GPU here; run this on a GPU machine (on CPU the set skips)"
    ]


def _summary_module() -> object:
    spec = importlib.util.spec_from_file_location(
        "gpu_summary", ROOT / "scripts" / "gpu_summary.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.gpu.test_gpu_launch" name="test_launch_auto" time="12.1"/>
<testcase classname="tests.gpu.test_gpu_resume" name="test_resume[0.5|x]" time="30.0">
  <failure message="AssertionError: fp16: 0.weight differs&#10;more">trace</failure></testcase>
<testcase classname="tests.gpu.test_gpu_telemetry" name="test_nvml" time="0.0">
  <skipped type="pytest.skip" message="NVML telemetry needs nvidia-ml-py">x</skipped></testcase>
<testcase classname="tests.gpu.test_gpu_compile" name="test_compile" time="1.0">
  <error message="fixture broke">y</error></testcase>
</testsuite></testsuites>
"""


def test_the_summary_lists_each_test_and_a_verdict(tmp_path: Path) -> None:
    summary: object = _summary_module()
    junit = tmp_path / "gpu.xml"
    junit.write_text(JUNIT)
    found = summary.outcomes(junit)  # type: ignore[attr-defined]
    assert [(o.test, o.result) for o in found] == [
        ("test_gpu_launch::test_launch_auto", "passed"),
        ("test_gpu_resume::test_resume[0.5|x]", "failed"),
        ("test_gpu_telemetry::test_nvml", "skipped"),
        ("test_gpu_compile::test_compile", "error"),
    ]
    info = {"date": "2026-11-30", "gpus": ["NVIDIA H200"], "torch": "2.11.0 (CUDA 13.0)"}
    text = summary.render(info, found, 95.4, 1)  # type: ignore[attr-defined]
    assert text.splitlines()[0].startswith("GPU check 2026-11-30: 1 x NVIDIA H200, driver unknown")
    assert (
        r"| `test_gpu_resume::test_resume[0.5\|x]` | failed: AssertionError: fp16: 0.weight" in text
    )
    assert (
        text.splitlines()[-1]
        == "FAIL: 1 passed, 1 failed, 1 error, 1 skipped in 95 s (exit code 1)"
    )
    passed = summary.render(info, found[:1], 12.0, 0)  # type: ignore[attr-defined]
    assert passed.splitlines()[-1] == "PASS: 1 passed in 12 s (exit code 0)"
    assert summary.outcomes(tmp_path / "missing.xml") == []  # type: ignore[attr-defined]
