"""Helpers shared by the sync tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accel import Workspace


def save_checkpoints(ws: Workspace, steps: tuple[int, ...] = (1, 2)) -> dict[int, Any]:
    """Real checkpoints through the store; returns the state saved per step."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    states = {}
    for step in steps:
        state = {"w": torch.randn(64, 32, generator=gen), "step": step}
        ws.checkpoints.save(state, step)
        states[step] = state
    return states


def finished_run(ws: Workspace, run_id: str = "20261129-150000-aaaaaa") -> Path:
    folder = ws.runs_dir / run_id
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"id": run_id, "status": "succeeded"}))
    (folder / "rank-0.log").write_text("epoch 0 loss 1.0\n")
    return folder


def tree(root: Path) -> dict[str, bytes]:
    """Relative path -> content of every file under ``root``."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def checkpoint_file_count(ws: Workspace) -> int:
    """Files of the committed checkpoints, manifests included (the store picks the names)."""
    return sum(len(info.files) + 1 for info in ws.checkpoints.all())
