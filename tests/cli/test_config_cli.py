"""`accel config` through Typer's test runner and through the installed executable."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from accel_runner import cli
from typer.testing import CliRunner

from accel.cli.main import app, main

runner = CliRunner()


def run(exe: list[str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*exe, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


def test_default_writes_a_valid_file_and_is_idempotent(project: Path) -> None:
    result = runner.invoke(app, ["config", "--default"])
    assert result.exit_code == 0, result.output
    path = project / ".accelerate" / "config" / "accelerate_config.yaml"
    assert path.is_file()
    first = path.read_bytes()
    result = runner.invoke(app, ["config", "--yes"])
    assert result.exit_code == 0 and "left unchanged" in result.output
    assert path.read_bytes() == first


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_default_over_a_folder_in_place_of_the_file_says_so(
    project: Path, capsys: pytest.CaptureFixture[str], force: list[str]
) -> None:
    """It said "exists; left unchanged" (exit 0), and with --force the storage line (1)."""
    path = project / ".accelerate" / "config" / "accelerate_config.yaml"
    path.mkdir(parents=True)
    assert main(["config", "--default", *force]) == 2
    assert capsys.readouterr().err == (
        f"error: {path} is a folder where the config file belongs: move it away, then run "
        "`accel config --default` again\n"
    )
    assert path.is_dir() and list(path.iterdir()) == []


def test_show_json_with_origins(project: Path) -> None:
    runner.invoke(app, ["config", "--default"])
    assert runner.invoke(app, ["config", "set", "launch.num_processes", "4"]).exit_code == 0
    result = runner.invoke(
        app, ["config", "show", "--json", "--origin"], env={"ACCEL_LOGS_LEVEL": "debug"}
    )
    data = json.loads(result.stdout)
    assert data["config"]["launch"]["num_processes"] == 4
    assert data["origins"]["launch.num_processes"]["layer"] == "project"
    assert data["origins"]["logs.level"] == {
        "layer": "env",
        "source": "ACCEL_LOGS_LEVEL",
        "line": None,
    }
    assert data["origins"]["launch.use_cpu"]["layer"] == "default"


def test_show_plain_table_when_piped(project: Path) -> None:
    result = runner.invoke(app, ["config", "show", "--origin"])
    assert result.exit_code == 0
    assert any(
        line.split() == ["launch.num_processes", "1", "default"]
        for line in result.stdout.splitlines()
    )
    assert "\x1b[" not in result.stdout


def test_get_schema_unset_validate(project: Path) -> None:
    runner.invoke(app, ["config", "set", "launch.mixed_precision", "bf16"])
    assert runner.invoke(app, ["config", "get", "launch.mixed_precision"]).stdout == "bf16\n"
    schema = json.loads(runner.invoke(app, ["config", "schema"]).stdout)
    assert "num_processes" in schema["properties"]["launch"]["properties"]
    assert runner.invoke(app, ["config", "unset", "launch.mixed_precision"]).exit_code == 0
    assert runner.invoke(app, ["config", "get", "launch.mixed_precision"]).stdout == "no\n"
    assert runner.invoke(app, ["config", "validate"]).exit_code == 0


def test_one_variable_of_launch_env_is_read_and_shown_as_a_secret_when_it_is_one(
    project: Path,
) -> None:
    def accel(*args: str) -> tuple[int, str]:
        result = cli(*args)
        return result.exit_code, result.stdout + result.stderr

    assert accel("config", "--default")[0] == 0
    assert accel("config", "set", "launch.env.NCCL_DEBUG", "WARN") == (
        0,
        "launch.env.NCCL_DEBUG = WARN\n",
    )
    token = "hf_" + "a" * 34
    assert accel("config", "set", "launch.env.HUB", token) == (0, "launch.env.HUB = ***\n")
    assert accel("config", "get", "launch.env.NCCL_DEBUG") == (0, "WARN\n")
    assert accel("config", "get", "launch.env.HUB") == (0, "***\n")
    code, said = accel("config", "get", "launch.env.NOPE")
    assert code == 1 and "launch.env has no variable 'NOPE'" in said
    assert accel("config", "unset", "launch.env.HUB") == (0, "launch.env.HUB unset\n")
    assert accel("config", "get", "launch.env") == (0, '{"NCCL_DEBUG": "WARN"}\n')


def test_config_without_terminal_asks_for_default(project: Path) -> None:
    assert main(["config"]) == 2
    assert not (project / ".accelerate").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["config", "set", "launch.num_processes", "0"],
            "error: invalid value for launch.num_processes",
        ),
        (["config", "set", "lanch.num_processes", "2"], "did you mean 'launch.num_processes'?"),
        (["config", "get", "cache.maxsize"], "did you mean 'cache.max_size'?"),
        (["config", "validate", "missing.yaml"], "missing.yaml: no such file"),
        (["config", "import", "missing.yaml"], "missing.yaml: no such file"),
        (["config", "show", "--bogus"], "No such option"),
    ],
)
@pytest.mark.timeout(60)
def test_bad_input_exits_2_with_one_line_and_changes_nothing(
    project: Path, accel_exe: list[str], args: list[str], message: str
) -> None:
    result = run(accel_exe, *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (project / ".accelerate" / "config" / "accelerate_config.yaml").exists()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_invalid_project_file_is_reported_with_file_and_line(
    project: Path, accel_exe: list[str]
) -> None:
    path = project / ".accelerate" / "config" / "accelerate_config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("launch:\n  num_processes: 2\n  mixed_precision: fp64\n")
    result = run(accel_exe, "config", "show")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {path}:3: launch.mixed_precision: expected one of no, fp16, bf16, got 'fp64'"
    )
    result = run(accel_exe, "config", "validate")
    assert result.returncode == 2 and ":3:" in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_executable_set_show_and_env_precedence(project: Path, accel_exe: list[str]) -> None:
    assert run(accel_exe, "config", "--default").returncode == 0
    assert run(accel_exe, "config", "set", "launch.max_restarts", "2").returncode == 0
    result = run(accel_exe, "config", "get", "launch.max_restarts", ACCEL_LAUNCH_MAX_RESTARTS="7")
    assert result.stdout.strip() == "7"
    result = run(accel_exe, "config", "get", "launch.max_restarts")
    assert result.stdout.strip() == "2"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_workspace_flag_and_env(project: Path, accel_exe: list[str], tmp_path: Path) -> None:
    other = tmp_path / "other" / ".accelerate"
    assert run(accel_exe, "--workspace", str(other), "config", "--default").returncode == 0
    assert (other / "config" / "accelerate_config.yaml").is_file()
    assert not (project / ".accelerate").exists()
    result = run(accel_exe, "status", "--json", ACCEL_WORKSPACE=str(other))
    assert json.loads(result.stdout)["workspace"] == str(other)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_version_help_and_python_m(accel_exe: list[str]) -> None:
    import sys

    assert run(accel_exe, "--version").stdout.startswith("accel ")
    assert "config" in run(accel_exe, "--help").stdout
    result = subprocess.run(
        [sys.executable, "-m", "accel", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout.startswith("accel ")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_import_reports_unmapped_keys(project: Path, accel_exe: list[str]) -> None:
    (project / "hf.yaml").write_text(
        "distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: fp16\n"
        "fsdp_config: {a: 1}\n"
    )
    result = run(accel_exe, "config", "import", "hf.yaml")
    assert result.returncode == 0, result.stderr
    assert "launch.num_processes = 2" in result.stdout
    assert "warning: fsdp_config: ignored, as Accelerate ignores it" in result.stderr
    (project / "no_type.yaml").write_text("num_processes: 2\n")  # Accelerate refuses it too
    refused = run(accel_exe, "config", "import", "no_type.yaml")
    assert refused.returncode == 2 and "no distributed_type" in refused.stderr


def test_unexpected_error_writes_a_crash_log(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import accel.status

    def boom(ws: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(accel.status, "collect", boom)
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert "unexpected RuntimeError: kaboom" in err
    crash = Path(err.split("the traceback is in ")[1].split(" (please")[0])
    assert "Traceback" in crash.read_text()
    assert err.count("\n") == 1
