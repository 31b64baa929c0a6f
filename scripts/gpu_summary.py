"""The summary ``scripts/gpu-check.sh`` prints: where it ran and what each GPU test did.

    python scripts/gpu_summary.py JUNIT_XML ELAPSED_SECONDS EXIT_CODE

Markdown, to paste into docs/benchmarks.md as the record of the last GPU run.
"""

from __future__ import annotations

import datetime
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Outcome:
    test: str
    result: str  # passed | failed | error | skipped
    detail: str = ""


def outcomes(junit: Path) -> list[Outcome]:
    """Every test case of a pytest ``--junitxml`` report; [] when there is none."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return []
    found = []
    for case in root.iter("testcase"):
        module = (case.get("classname") or "").rsplit(".", 1)[-1]
        test = f"{module}::{case.get('name', '')}"
        result, detail = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                result = "failed" if kind == "failure" else kind
                detail = (
                    (node.get("message") or "").splitlines()[0][:160] if node.get("message") else ""
                )
                break
        found.append(Outcome(test, result, detail))
    return found


def environment() -> dict[str, Any]:
    """The machine: GPUs as torch sees them, the driver (NVML), torch, CUDA, NCCL."""
    info: dict[str, Any] = {"date": datetime.date.today().isoformat()}
    try:
        import torch

        info["torch"] = f"{torch.__version__} (CUDA {torch.version.cuda})"
        count = torch.cuda.device_count()
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(count)]
        nccl = getattr(torch.cuda, "nccl", None)
        version = (
            nccl.version() if nccl is not None and torch.distributed.is_nccl_available() else None
        )
        info["nccl"] = ".".join(str(v) for v in version) if isinstance(version, tuple) else None
    except Exception as exc:  # noqa: BLE001 - the summary must print whatever broke
        info["torch"] = f"unavailable ({type(exc).__name__}: {exc})"
    info["driver"] = _driver()
    return info


def _driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no nvidia-ml-py or no driver
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def render(info: dict[str, Any], found: list[Outcome], elapsed: float, code: int) -> str:
    counts = {
        r: sum(1 for o in found if o.result == r) for r in ("passed", "failed", "error", "skipped")
    }
    gpus = info.get("gpus") or []
    lines = [
        f"GPU check {info['date']}: {len(gpus)} x {', '.join(sorted(set(gpus))) or 'no GPU'}, "
        f"driver {info.get('driver') or 'unknown'}, torch {info.get('torch')}, "
        f"NCCL {info.get('nccl') or 'n/a'}",
        "",
        "| test | result |",
        "|---|---|",
    ]
    for o in found:
        shown = f"{o.result}: {o.detail}" if o.detail else o.result
        lines.append(f"| `{_cell(o.test)}` | {_cell(shown)} |")
    verdict = (
        "PASS"
        if code == 0 and counts["passed"] and not counts["failed"] + counts["error"]
        else "FAIL"
    )
    total = ", ".join(f"{n} {r}" for r, n in counts.items() if n) or "no test ran"
    lines += ["", f"{verdict}: {total} in {elapsed:.0f} s (exit code {code})"]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def main(argv: list[str]) -> int:
    junit, elapsed, code = Path(argv[0]), float(argv[1]), int(argv[2])
    print(render(environment(), outcomes(junit), elapsed, code))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
