from __future__ import annotations

from pathlib import Path

from accel.clean import clean
from accel.workspace import Workspace


def test_workspace_clean_is_the_python_twin_of_accel_clean(project: Path) -> None:
    ws = Workspace.discover().ensure()
    ws.cache.put("old/a", b"x" * 100)
    ws.cache.put("old/b", b"y" * 10)
    info = ws.cache.info("old/a")
    assert info is not None
    ten_days_later = info.last_used + 10 * 86400
    assert clean(ws, older_than="30d", now=ten_days_later).plan.items == ()
    outcome = clean(ws, older_than="7d", now=ten_days_later, dry_run=True)
    assert outcome.result is None
    assert sorted(Path(p.item.location).name for p in outcome.plan.items) == ["a.entry", "b.entry"]
    assert "old/a" in ws.cache  # a dry run changes nothing
    clean(ws, older_than="7d", now=ten_days_later)
    assert "old/a" not in ws.cache and "old/b" not in ws.cache
