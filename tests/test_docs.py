"""The README's commands are the ones CI runs, and the docs cover every config key."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from accel.config import schema
from tests_paths import ROOT


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(python3 -m venv .*)\n```", text)


def test_readme_has_the_two_commands_and_ci_runs_the_test_one() -> None:
    install_and_run, dev_and_test = readme_commands()
    assert "accel launch -n 2 examples/train.py" in install_and_run
    ci = (ROOT / ".ci" / "run").read_text()
    # CI runs the install and the tests as two blocks (others run beside the tests):
    # each part of the command is there, as written, in the README's order.
    install, tests = (f"\n    {part}\n" for part in dev_and_test.split(" && ")[2:])
    assert install in ci and tests in ci
    assert ci.index(install) < ci.index(tests)


def test_configuration_page_documents_every_key_and_its_env_twin() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    for f in schema.FIELDS:
        assert f"`{f.key}`" in text and f"`{f.env_var}`" in text, f.key


def test_every_link_and_docs_path_in_the_docs_exists() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)#\s:]+\.md)(?:#[^)]*)?\)", text):
            assert (page.parent / target).exists(), f"{page.name} links {target}"
        for target in re.findall(r"\bdocs/[\w/.-]+\.md\b", text):
            assert (ROOT / target).exists(), f"{page.name} names {target}"


def test_the_sync_page_names_the_files_a_checkpoint_holds() -> None:
    from accel.store.checkpoints import MANIFEST, STATE_TENSORS

    text = (ROOT / "docs" / "sync.md").read_text()
    assert STATE_TENSORS in text and MANIFEST in text and "state.pt" not in text


def _pull_section() -> str:
    text = (ROOT / "docs" / "guarantees.md").read_text()
    return text.split("### What a pull may carry", 1)[1].split("\n#", 1)[0]


def documented_carried_keys() -> set[str]:
    """The keys guarantees.md says a pull may carry, read from its list: ``- `group`:
    `a`, `b` (a note), `c`; `group.key`; ...`` (a bare name belongs to the group before
    it in the same part; a dotted name stands alone)."""
    lines = _pull_section().split("**allowlist**", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("- "))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    items = " ".join(line.strip() for line in lines[start:end])
    items = re.sub(r"\([^)]*\)", "", items)  # notes: "(compared with ..., never imported)"
    keys = set()
    for part in re.split(r"[;\n]|(?:^|\s)- ", items):
        group = re.match(r"\s*`([a-z_]+)`:", part)
        names = re.findall(r"`([a-z_.]+)`", part[group.end() :] if group else part)
        for name in names:
            assert group or "." in name, f"{name!r} in guarantees.md names no group"
            keys.add(f"{group.group(1)}.{name}" if group else name)
    return keys


def test_the_keys_a_pull_may_carry_are_documented_exactly() -> None:
    """guarantees.md's allowlist is CONFIG_CARRIED: a key added to one and not the other
    (or dropped) fails here, and so does a key left out with its reason (CONFIG_KEPT)."""
    from accel.sync._trust import CONFIG_CARRIED, CONFIG_KEPT

    assert documented_carried_keys() == set(CONFIG_CARRIED)
    kept = _pull_section().split("Every other key keeps its local value", 1)[1]
    kept = kept.split("A key new to the schema", 1)[0]
    assert set(re.findall(r"`([a-z_]+\.[a-z_]+)`", kept)) == set(CONFIG_KEPT)


def test_every_documented_import_path_imports() -> None:
    """The docs' ``from accel... import ...`` lines and the stable paths table: a moved
    or renamed name fails here, not in a user's script."""
    import importlib

    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    lines = [
        m.groups()
        for path in docs
        for m in re.finditer(r"^\s*from (accel[\w.]*) import ([\w, ]+)$", path.read_text(), re.M)
    ]
    table = (ROOT / "docs" / "worker-api.md").read_text().split("## Stable import paths")[1]
    table = table.split("\n## ")[0]
    rows = re.findall(r"^\| `(accel[\w.]*)` \| (.*) \|$", table, re.M)
    for module, names in rows:
        lines.append((module, ", ".join(n for n in re.findall(r"`(\w+)`", names))))
    assert len(rows) >= 8 and len(lines) > len(rows)
    for module, names in lines:
        imported = importlib.import_module(module)
        for name in (n.strip() for n in names.split(",") if n.strip()):
            assert hasattr(imported, name), f"{module}.{name}"


def test_the_runs_pages_python_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page showed ``runs.is_live(ws, ...)``, which raised: the functions take the
    layout. Its snippet runs here against a workspace with one recorded run."""
    from accel import Workspace
    from accel.runs import new_run_id, run_dir, write_record

    ws = Workspace(tmp_path / ".accelerate")
    ws.ensure()
    run_id = new_run_id(datetime.now(timezone.utc))
    folder = run_dir(ws.layout, run_id)
    folder.mkdir(parents=True)
    write_record(folder, {"id": run_id, "status": "succeeded", "exit_code": 0, "version": 1})
    page = (ROOT / "docs" / "commands" / "runs.md").read_text()
    snippet = page.split("## From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    printed: list[str] = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))
    exec(compile(snippet, "runs.md", "exec"), {})
    assert printed and printed[0].startswith(f"{run_id} succeeded")
