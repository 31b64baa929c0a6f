"""`accel config` is how a project file is repaired, so nothing in that file, the
workspace's data folder or its marker may stop it: each test starts from a state a user
reached (by `config set`, a hand edit, or following `env --check`) and repairs it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from accel.cli.main import main
from accel.errors import WorkspaceError
from accel.workspace import Workspace


def config_file(project: Path) -> Path:
    return project / ".accelerate" / "config" / "accelerate_config.yaml"


@pytest.fixture
def accel(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """The CLI in this process: (exit code, stdout and stderr)."""

    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out + err

    return run


@pytest.mark.parametrize("target", [".", "notes"])
def test_a_workspace_path_holding_other_files_is_refused_before_it_is_written(
    project: Path, target: str, accel: Callable[..., tuple[int, str]]
) -> None:
    (project / "notes").mkdir()
    (project / "notes" / "todo.txt").write_text("mine")
    assert accel("config", "--default")[0] == 0
    before = config_file(project).read_bytes()
    code, out = accel("config", "set", "workspace.path", target)
    assert code == 2 and "holds files accel did not write" in out, out
    assert config_file(project).read_bytes() == before
    # an empty or new folder, or one that is already this workspace's, is taken
    assert accel("config", "set", "workspace.path", "data")[0] == 0
    Workspace.discover().ensure()  # what `accel launch` does first
    assert (project / "data" / "accel-data.json").is_file()
    assert accel("config", "set", "workspace.path", "data")[0] == 0


def test_a_hand_edited_workspace_path_can_be_unset_and_replaced(
    project: Path, accel: Callable[..., tuple[int, str]]
) -> None:
    # the project folder itself: accel refuses to write its data among the user's files
    config_file(project).parent.mkdir(parents=True)
    config_file(project).write_text("workspace:\n  path: .\n")
    with pytest.raises(WorkspaceError, match="holds files accel did not write"):
        Workspace.discover().ensure()  # what `accel launch` does first
    # the repair the line asks for works: before, each of these refused with that line
    assert accel("config", "set", "workspace.path", "elsewhere") == (
        0,
        "workspace.path = elsewhere\n",
    )
    assert accel("config", "unset", "workspace.path") == (0, "workspace.path unset\n")
    Workspace.discover().ensure()


@pytest.mark.parametrize(
    "text",
    [
        "launch:\n\tnum_processes: 2\n",  # a tab
        "launhc:\n  num_processes: 2\n",  # a section misspelt
        "launch:\n  num_processes: many\n",
        "version: 2\n",  # written by a newer accel
        "workspace:\n  path: .\n",  # a data folder accel must refuse
    ],
)
def test_force_replaces_a_project_file_that_is_invalid(
    project: Path, text: str, accel: Callable[..., tuple[int, str]]
) -> None:
    config_file(project).parent.mkdir(parents=True)
    config_file(project).write_text(text)
    accel("config", "--default")
    assert config_file(project).read_text() == text  # without --force: left as it is
    code, out = accel("config", "--default", "--force")
    assert code == 0 and out.endswith(f"wrote {config_file(project)}\n"), out
    assert Workspace.discover().config.values["launch.num_processes"] == 1  # the default


def test_a_file_as_the_workspace_is_named_as_one(
    project: Path, accel: Callable[..., tuple[int, str]]
) -> None:
    (project / "afile").write_text("hi")
    for args in (["-w", "afile", "config", "show"], ["-w", "afile", "config", "--default"]):
        code, out = accel(*args)
        assert (code, out) == (
            2,
            f"error: --workspace {project / 'afile'} is a file, not a folder: give a "
            "workspace folder\n",
        )
    assert (project / "afile").read_text() == "hi"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        # click took -1 for an option: "No such option: -1"
        (
            ["config", "set", "launch.num_processes", "-1"],
            "launch.num_processes: expected an integer from 1 to 1024 or 'auto', got '-1'",
        ),
        # an enum was told about a string's 4096-character limit
        (
            ["config", "set", "launch.mixed_precision", ""],
            "launch.mixed_precision: expected one of no, fp16, bf16, got ''",
        ),
        # a folder was "no such file", as `validate` does not say
        (["config", "import", "."], ".: not a regular file"),
    ],
)
def test_a_bad_value_is_named_for_what_it_is(
    project: Path, accel: Callable[..., tuple[int, str]], args: list[str], line: str
) -> None:
    code, out = accel(*args)
    assert code == 2 and out.strip() == f"error: {'invalid value for ' * (args[1] == 'set')}{line}"


def test_unset_in_a_folder_with_no_workspace_makes_none(
    project: Path, accel: Callable[..., tuple[int, str]]
) -> None:
    # it made a whole .accelerate/ to say the key was not set
    code, out = accel("config", "unset", "launch.num_processes")
    assert (code, out) == (0, "launch.num_processes was not set in the project file\n")
    assert not (project / ".accelerate").exists()
    assert accel("config", "unset", "launch.nope")[0] == 2  # an unknown key is still one


def hand_edited(project: Path, text: str) -> None:
    """A workspace whose project file was edited by hand."""
    Workspace(project / ".accelerate").ensure()
    config_file(project).write_text(text)


@pytest.mark.parametrize("value", ["many", "[1, 2]", "{a: 1}", "null", "|\n    two\n    lines"])
def test_set_repairs_a_bad_value_of_its_own_key(
    project: Path, accel: Callable[..., tuple[int, str]], value: str
) -> None:
    # a hand edit gone wrong: `set` refused to replace the value it names, with that
    # value's error, and only `unset` could repair the file
    hand_edited(project, f"# mine\nlaunch:\n  num_processes: {value}\n  max_restarts: 2\n")
    code, out = accel("config", "set", "launch.num_processes", "2")
    assert (code, out) == (0, "launch.num_processes = 2\n")
    assert config_file(project).read_text() == (
        "# mine\nlaunch:\n  num_processes: 2\n  max_restarts: 2\n"
    )
    assert Workspace.discover().config.values["launch.num_processes"] == 2


def test_set_repairs_its_own_key_in_a_flow_mapping(
    project: Path, accel: Callable[..., tuple[int, str]]
) -> None:
    hand_edited(project, "launch: {num_processes: many, max_restarts: 3}\n")
    code, out = accel("config", "set", "launch.num_processes", "2")
    assert code == 0, out
    values = Workspace.discover().config.values
    assert (values["launch.num_processes"], values["launch.max_restarts"]) == (2, 3)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("launch:\n  num_processes: many\n  max_restarts: lots\n", "launch.max_restarts"),
        ("launch:\n  num_processes: many\n  num_processes: 3\n", "duplicate key"),
    ],
)
def test_set_leaves_the_files_other_errors_to_the_user(
    project: Path, accel: Callable[..., tuple[int, str]], text: str, named: str
) -> None:
    hand_edited(project, text)
    code, out = accel("config", "set", "launch.num_processes", "2")
    assert code == 2 and named in out and len(out.strip().splitlines()) == 1, out
    assert config_file(project).read_text() == text
