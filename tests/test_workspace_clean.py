from __future__ import annotations

from pathlib import Path

from accel.workspace import Workspace


def test_workspace_clean_is_the_python_twin_of_accel_clean(project: Path) -> None:
    ws = Workspace.discover().ensure()
    ws.cache.put("old/a", b"x" * 100)
    ws.cache.put("young/b", b"y" * 10)
    later = ws.cache.info("old/a").last_used + 10 * 86400  # type: ignore[union-attr]
    outcome = ws.clean(older_than="7d", now=later + 1, dry_run=True)
    assert outcome.result is None
    planned = [p.item.location for p in outcome.plan.items]
    assert len(planned) == 1 and "old" in planned[0]
    assert "old/a" in ws.cache  # a dry run changes nothing
    outcome = ws.clean(older_than="7d", now=later + 1)
    assert "old/a" not in ws.cache
