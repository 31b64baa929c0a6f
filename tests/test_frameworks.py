"""Framework caches: the environment accel gives workers, and what status reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel import Workspace
from accel.frameworks import framework_env, scan_framework_caches

CACHE = Path("/p/.accelerate/cache")


def test_default_caches_point_into_the_workspace() -> None:
    assert framework_env(["inductor", "triton"], CACHE, {}) == {
        "TORCHINDUCTOR_CACHE_DIR": "/p/.accelerate/cache/frameworks/inductor",
        "TRITON_CACHE_DIR": "/p/.accelerate/cache/frameworks/triton",
    }


def test_what_the_user_set_wins_and_opt_ins_are_added() -> None:
    env = {"TRITON_CACHE_DIR": "/fast/triton", "HF_HOME": ""}
    got = framework_env(["inductor", "triton", "hf", "torch_hub"], CACHE, env)
    assert got == {
        "TORCHINDUCTOR_CACHE_DIR": "/p/.accelerate/cache/frameworks/inductor",
        "HF_HOME": "/p/.accelerate/cache/frameworks/hf",
        "TORCH_HOME": "/p/.accelerate/cache/frameworks/torch_hub",
    }
    assert framework_env([], CACHE, {}) == {}
    with pytest.raises(ValueError, match="unknown framework cache"):
        framework_env(["jax"], CACHE, {})


def test_scan_reports_enabled_and_present_caches(project: Path) -> None:
    ws = Workspace.discover().ensure()
    hub = ws.cache_dir / "frameworks" / "torch_hub" / "checkpoints"
    hub.mkdir(parents=True)
    (hub / "resnet.pth").write_bytes(b"x" * 100)
    found = {c.name: c for c in scan_framework_caches(ws.cache_dir, ws.settings.cache)}
    assert set(found) == {"inductor", "triton", "torch_hub"}
    assert found["inductor"].enabled and found["inductor"].size == 0
    assert not found["torch_hub"].enabled
    assert (found["torch_hub"].size, found["torch_hub"].files) == (100, 1)
    assert found["torch_hub"].to_json()["variable"] == "TORCH_HOME"
