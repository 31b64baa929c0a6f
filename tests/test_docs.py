"""The README's commands are the ones CI runs, and the docs cover every config key."""

from __future__ import annotations

import re

from accel.config import schema
from tests_paths import ROOT


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(python3 -m venv .*)\n```", text)


def test_readme_has_the_two_commands_and_ci_runs_the_test_one() -> None:
    install_and_run, dev_and_test = readme_commands()
    assert "accel launch -n 2 examples/train.py" in install_and_run
    ci = (ROOT / ".ci" / "run").read_text()
    test_part = dev_and_test.split("&& ", 2)[2]
    assert test_part in ci


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
    from accel.store.checkpoints import MANIFEST, STATE_FILE

    text = (ROOT / "docs" / "sync.md").read_text()
    assert STATE_FILE in text and MANIFEST in text and "state.pt" not in text
