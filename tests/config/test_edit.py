from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from accel.config import project as config_project
from accel.config.edit import set_in_text, unified_diff, unset_in_text
from accel.errors import ConfigError, UsageError
from accel.workspace import Workspace

COMMENTED = """\
# my project
version: 1

launch:
  # how many workers
  num_processes: 2  # per node
  env:
    A: "1"
    B: "2"
  max_restarts: 1

cache:
  max_size: 1GB
"""


def test_set_replaces_the_value_and_keeps_comments_and_order() -> None:
    out = set_in_text(COMMENTED, "launch.num_processes", "4")
    assert out == COMMENTED.replace("num_processes: 2  # per node", "num_processes: 4  # per node")


def test_set_replaces_a_nested_block_value() -> None:
    out = set_in_text(COMMENTED, "launch.env", "{C: '3'}")
    assert "  env: {C: '3'}\n  max_restarts: 1\n" in out
    assert 'A: "1"' not in out


def test_set_adds_missing_key_and_section() -> None:
    out = set_in_text(COMMENTED, "launch.use_cpu", "true")
    assert "  max_restarts: 1\n  use_cpu: true\n\ncache:" in out
    out = set_in_text(COMMENTED, "logs.level", "debug")
    assert out.endswith("  max_size: 1GB\n\nlogs:\n  level: debug\n")


def test_a_new_key_goes_above_the_comment_that_heads_the_next_section() -> None:
    text = (
        "launch:\n  num_processes: 2\n\n# --- cache settings below ---\ncache:\n  max_size: 1GB\n"
    )
    assert set_in_text(text, "launch.use_cpu", "true") == (
        "launch:\n  num_processes: 2\n  use_cpu: true\n\n# --- cache settings below ---\n"
        "cache:\n  max_size: 1GB\n"
    )


def test_unset_removes_the_key_with_its_block() -> None:
    out = unset_in_text(COMMENTED, "launch.env")
    assert "env:" not in out and "A:" not in out and "max_restarts: 1" in out


@pytest.fixture
def ws(ws: Workspace) -> Workspace:
    ws.config_file.write_text(COMMENTED)
    return ws


def test_set_value_writes_atomically_and_validates(ws: Workspace) -> None:
    inode = ws.config_file.stat().st_ino
    assert config_project.set_value(ws, "cache.max_size", "20GB") == 20 * 10**9
    assert "max_size: 20GB" in ws.config_file.read_text()
    assert "# how many workers" in ws.config_file.read_text()
    assert ws.config_file.stat().st_ino != inode  # replaced, not rewritten in place
    assert Workspace.discover().config["cache.max_size"] == 20 * 10**9
    leftovers = [p for p in ws.config_file.parent.iterdir() if p.name != ws.config_file.name]
    assert leftovers == []


def test_a_linked_config_stays_a_link_and_its_file_is_rewritten(
    ws: Workspace, tmp_path: Path
) -> None:
    # as dotfile managers (stow, chezmoi, yadm) make it: the link was replaced by a plain
    # file, the dotfile kept the old values and the two parted silently
    dotfile = tmp_path / "dotfiles" / "accel.yaml"
    dotfile.parent.mkdir()
    ws.config_file.rename(dotfile)
    ws.config_file.symlink_to(os.path.relpath(dotfile, ws.config_file.parent))
    config_project.set_value(ws, "launch.num_processes", "4")
    config_project.unset_value(ws, "launch.max_restarts")
    config_project.write(ws, {"cache.max_size": 10**9})  # --default --force
    assert ws.config_file.is_symlink() and ws.config_file.resolve() == dotfile
    assert Workspace.discover().config["cache.max_size"] == 10**9
    config_project.write(ws, {})
    config_project.set_value(ws, "launch.num_processes", "4")
    assert "num_processes: 4" in dotfile.read_text()
    assert sorted(p.name for p in dotfile.parent.iterdir()) == ["accel.yaml"]  # no temporary


def test_a_link_to_a_folder_that_is_gone_is_refused_and_no_folder_is_made(
    ws: Workspace, tmp_path: Path
) -> None:
    """The folders the link named were made, outside the workspace, by `config set`."""
    gone = tmp_path / "dotfiles" / "deep" / "accel.yaml"
    ws.config_file.unlink()
    ws.config_file.symlink_to(gone)
    with pytest.raises(ConfigError) as refused:
        config_project.set_value(ws, "launch.num_processes", "4")
    assert str(refused.value) == (
        f"{ws.config_file} is a link to {gone}, in a folder that does not exist: make that "
        "folder (or mount its disk), or replace the link with a file"
    )
    assert not (tmp_path / "dotfiles").exists() and ws.config_file.is_symlink()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("launch.num_processes", "-2", "expected an integer from 1 to 1024 or 'auto'"),
        ("launch.nope", "1", "unknown config key 'launch.nope'"),
        ("cache.max_size", "7x", "expected a size"),
    ],
)
def test_bad_set_changes_nothing(ws: Workspace, key: str, value: str, message: str) -> None:
    before = ws.config_file.read_bytes()
    with pytest.raises(UsageError, match=message):
        config_project.set_value(ws, key, value)
    assert ws.config_file.read_bytes() == before


def test_set_refuses_to_edit_an_invalid_file(ws: Workspace) -> None:
    ws.config_file.write_text("launch:\n  num_processes: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        config_project.set_value(ws, "launch.num_processes", "2")


def test_unset_value(ws: Workspace) -> None:
    assert config_project.unset_value(ws, "launch.max_restarts") is True
    assert config_project.unset_value(ws, "launch.max_restarts") is False
    assert Workspace.discover().config.origins["launch.max_restarts"].layer == "default"


def test_a_file_with_windows_line_ends_keeps_them_through_every_edit(ws: Workspace) -> None:
    # a config saved by a Windows editor and checked in as it is: every edit added LF
    # lines among its CRLF ones, and git showed the whole file as changed
    crlf = COMMENTED.replace("\n", "\r\n")
    ws.config_file.write_bytes(crlf.encode())
    config_project.set_value(ws, "launch.num_processes", "4")  # a line replaced, comment kept
    config_project.set_value(ws, "launch.mixed_precision", "bf16")  # a line added
    config_project.set_value(ws, "logs.level", "debug")  # a section added
    config_project.set_value(ws, "launch.env.C", "3")  # an entry of a block
    config_project.unset_value(ws, "launch.max_restarts")
    before, after = config_project.plan_edit(ws, {"checkpoints.keep_last": 2})  # the questions
    shown = unified_diff(before, after, ws.config_file)  # what the questions show: no CR
    assert "+  keep_last: 2" in shown and not any("\r" in line for line in shown)
    config_project.write_edit(ws, before, after)
    text = ws.config_file.read_bytes().decode()
    assert text.count("\n") == text.count("\r\n") > COMMENTED.count("\n")
    assert "num_processes: 4  # per node\r\n" in text and "level: debug\r\n" in text
    cfg = Workspace.discover().config
    assert (cfg["launch.num_processes"], cfg["launch.env"]["C"], cfg["checkpoints.keep_last"]) == (
        4, "3", 2
    )  # fmt: skip
    lf = COMMENTED  # and a file of LF lines gets no CR
    ws.config_file.write_text(lf)
    config_project.set_value(ws, "logs.level", "debug")
    assert "\r" not in ws.config_file.read_text()


def test_flow_style_file_falls_back_to_a_rewrite_with_same_values(ws: Workspace) -> None:
    ws.config_file.write_text("launch: {num_processes: 2, max_restarts: 1}\n")
    config_project.set_value(ws, "launch.num_processes", "3")
    cfg = Workspace.discover().config
    assert (cfg["launch.num_processes"], cfg["launch.max_restarts"]) == (3, 1)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_concurrent_sets_lose_no_update(ws: Workspace) -> None:
    import subprocess
    import sys

    keys = [
        "launch.max_restarts",
        "launch.machine_rank",
        "logs.backup_count",
        "launch.num_machines",
        "launch.env.A",  # two variables of one mapping: each keeps the other
        "launch.env.B",
    ]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from accel.workspace import Workspace; from accel.config import project\n"
                "for i in range(1, 16): project.set_value(Workspace.discover(), sys.argv[1], str(i))",
                key,
            ],
            env=os.environ,
        )
        for key in keys
    ]
    assert [p.wait(timeout=50) for p in procs] == [0] * len(keys)
    cfg = Workspace.discover().config
    assert [cfg[k] for k in keys[:4]] == [15] * 4
    assert cfg["launch.env"] == {"A": "15", "B": "15"}


def test_one_variable_of_launch_env_is_set_and_unset_alone(ws: Workspace) -> None:
    # `config set launch.env C=3` replaces the mapping: a user adding one variable that
    # way lost the others, and `launch.env.NAME` was an unknown key
    config_project.set_value(ws, "launch.env", "A=1,B=2")
    assert config_project.set_value(ws, "launch.env.C", "x,y=z") == "x,y=z"  # one value
    assert config_project.set_value(ws, "launch.env.A", "10") == "10"
    assert Workspace.discover().config["launch.env"] == {"A": "10", "B": "2", "C": "x,y=z"}
    with pytest.raises(UsageError, match="launch.env.1X: invalid environment variable name"):
        config_project.set_value(ws, "launch.env.1X", "1")
    assert config_project.unset_value(ws, "launch.env.B") is True
    assert config_project.unset_value(ws, "launch.env.B") is False
    assert Workspace.discover().config["launch.env"] == {"A": "10", "C": "x,y=z"}
    config_project.unset_value(ws, "launch.env.A")
    config_project.unset_value(ws, "launch.env.C")
    assert "env" not in ws.config_file.read_text()  # the key goes with its last variable


def _mode(path: os.PathLike[str]) -> int:
    return os.stat(path).st_mode & 0o777


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.parametrize(
    "env",
    [
        '{"HF_TOKEN": "hf-plain-value"}',
        '{"MYSQL_PWD": "hunter22"}',
        '{"PIP_INDEX_URL": "https://:pw-123@idx.example/simple"}',
    ],
)
def test_a_config_holding_secrets_is_written_private(
    ws: Workspace, umask_022: None, env: str
) -> None:
    from accel.cli.main import main

    assert main(["config", "set", "launch.num_processes", "2"]) == 0
    assert _mode(ws.config_file) == 0o644  # a config without secrets: as the umask says
    assert main(["config", "set", "launch.env", env]) == 0
    assert _mode(ws.config_file) == 0o600
    assert main(["config", "set", "launch.num_processes", "3"]) == 0
    assert _mode(ws.config_file) == 0o600  # still holding it: still private
    assert main(["config", "unset", "launch.env"]) == 0
    assert _mode(ws.config_file) == 0o600  # made private once, never opened up again


def test_a_config_without_secrets_keeps_the_mode_it_has(ws: Workspace, umask_022: None) -> None:
    config_project.set_value(ws, "launch.env", '{"OMP_NUM_THREADS": "4"}')
    assert _mode(ws.config_file) == 0o644
    os.chmod(ws.config_file, 0o640)
    config_project.set_value(ws, "launch.num_processes", "2")
    assert _mode(ws.config_file) == 0o640
