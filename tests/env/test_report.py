"""``accel env``: three forms, secrets never shown, a partial report in a bare environment,
the devices, the live runs and the sizes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from env_runner import env_in_process, make_ws, run_env

from accel._redact import REDACTED
from accel.env import relevant_environment

SECRETS = {
    "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123",
    "WANDB_API_KEY": "wandb-secret-value-1",
    "NCCL_PASSWORD": "nccl-secret-value-2",
    "ACCELERATE_SECRET_THING": "accelerate-secret-3",
    "HF_ENDPOINT": "https://alice:url-secret-4@hub.example.org/api",
}
SECRET_VALUES = (
    "abcdefghijklmnopqrstuvwxyz0123",
    "wandb-secret-value-1",
    "nccl-secret-value-2",
    "accelerate-secret-3",
    "url-secret-4",
    "config-secret-5",
)


# -- the variables shown (the redaction itself: tests/test_redact.py) ---------------------


def test_relevant_environment_picks_training_variables_and_redacts() -> None:
    env = {
        "OMP_NUM_THREADS": "4",
        "NCCL_DEBUG": "INFO",
        "HOME": "/h",
        "HF_TOKEN": "x",
        "ACCEL_WORKSPACE": "/w",
        "UNRELATED": "1",
    }
    assert relevant_environment(env) == {
        "ACCEL_WORKSPACE": "/w",
        "HF_TOKEN": REDACTED,
        "NCCL_DEBUG": "INFO",
        "OMP_NUM_THREADS": "4",
    }


@pytest.mark.parametrize(
    ("launch_env", "shown"),
    [
        ("DB_PASSWORD=correct mysekritHorse battery", "DB_PASSWORD=***"),
        ("A=1, DB_PASSWORD=x;mysekritSemi", "A=1,DB_PASSWORD=***"),
        ('{"HF_TOKEN": "ab\\"mysekritQuote", "A": 1}', '{"HF_TOKEN": "***", "A": "1"}'),
        ("DB_PASSWORD=Hunter,mysekritTail", REDACTED),  # does not parse: hidden whole
        ('{"HF_TOKEN": ["mysekritList"]}', REDACTED),
    ],
)
def test_accel_launch_env_is_shown_as_its_variables_redacted(launch_env: str, shown: str) -> None:
    # the text, Markdown and JSON forms all show these values
    assert relevant_environment({"ACCEL_LAUNCH_ENV": launch_env}) == {"ACCEL_LAUNCH_ENV": shown}


def test_the_secrets_of_accel_launch_env_are_scrubbed_from_every_value_shown() -> None:
    env = {"ACCEL_LAUNCH_ENV": "HF_TOKEN=mysekrit token", "HF_HOME": "/c/mysekrit token/x"}
    assert relevant_environment(env)["HF_HOME"] == "/c/***/x"


# -- the three forms ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_text_markdown_and_json_never_show_a_secret(
    project: Path,
    accel_exe: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = make_ws(project)
    ws.config_file.write_text("launch:\n  env:\n    SERVICE_TOKEN: config-secret-5\n")
    for name, value in {**SECRETS, "OMP_NUM_THREADS": "3"}.items():
        monkeypatch.setenv(name, value)
    text = run_env(accel_exe)  # the installed executable, no terminal
    forms = {(): (text.returncode, text.stdout, text.stderr)}
    forms.update({form: env_in_process(capsys, *form) for form in [("--markdown",), ("--json",)]})
    for form, (code, out, err) in forms.items():
        assert code == 0, (form, err)
        assert not [s for s in SECRET_VALUES if s in out + err], form
        assert "OMP_NUM_THREADS" in out and "HF_TOKEN" in out
    assert forms[("--markdown",)][1].startswith("## accel env")
    assert "| OMP_NUM_THREADS | 3 |" in forms[("--markdown",)][1]
    assert "torch" in text.stdout and "2." in text.stdout and "\x1b[" not in text.stdout
    data = json.loads(forms[("--json",)][1])
    for key in (
        "accel_version",
        "python",
        "platform",
        "torch",
        "devices",
        "workspace",
        "config",
        "environment",
        "packages",
        "problems",
        "healthy",
    ):
        assert key in data
    assert isinstance(data["devices"], list)  # always listed, by the cheap probe
    assert data["torch"]["build"] in ("cpu", "cuda", "rocm")
    assert data["torch"]["backends"]["gloo"] is True
    assert data["config"]["values"]["launch"]["env"] == {"SERVICE_TOKEN": REDACTED}
    assert data["config"]["origins"]["launch.env"].startswith("project")
    assert data["workspace"]["path"] == str(ws.path) and data["workspace"]["exists"]
    assert set(data["workspace"]["sizes"]) >= {"config", "cache", "checkpoints", "logs", "runs"}
    assert data["healthy"] is True and data["problems"] == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_bare_environment_gets_a_report_not_a_crash(
    project: Path, accel_exe: list[str], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CONFIG_HOME", "LANG")}
    env.update(LANG="C", LC_ALL="C", TERM="dumb")
    for form in [(), ("--check", "--json")]:
        result = run_env(accel_exe, *form, env=env)
        assert result.returncode == 0, (form, result.stderr)
        assert "Traceback" not in result.stderr
    assert not (project / ".accelerate").exists()  # reading never creates the workspace


def test_devices_are_probed_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(env_in_process(capsys, "--json", "--devices")[1])
    assert isinstance(data["devices"], list)
    for device in data["devices"]:
        assert {"index", "name", "total_memory", "capability", "uuid"} <= set(device)
    assert json.loads(env_in_process(capsys, "--json", "--no-devices")[1])["devices"] is None


def test_the_cpu_count_is_a_number(capsys: pytest.CaptureFixture[str]) -> None:
    # it was a string ("2", or "" when unknown) in --json, unlike every other count
    data = json.loads(env_in_process(capsys, "--json", "--no-devices")[1])
    assert data["platform"]["cpu_count"] == os.cpu_count()
    (line,) = [ln for ln in env_in_process(capsys)[1].splitlines() if ln.startswith("cpus")]
    assert line.split()[-1] == str(os.cpu_count())


def test_live_runs_and_sizes_are_reported(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel.runs import run_lock

    ws = make_ws(project)
    (ws.cache_dir / "blob").write_bytes(b"b" * 1234)
    with run_lock(ws.layout, "20261129-000000-abc123"):
        data = json.loads(env_in_process(capsys, "--json")[1])
    assert data["workspace"]["live_runs"] == ["20261129-000000-abc123"]
    assert data["workspace"]["sizes"]["cache"] == 1234
    assert data["workspace"]["writable"] is True and data["workspace"]["layout_version"] == 1


def test_json_and_markdown_together_are_one_line_exit_2(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two output forms at once printed JSON and dropped --markdown without a word."""
    code, out, err = env_in_process(capsys, "--json", "--markdown", "--check")
    assert (code, out) == (2, "")
    assert err == "error: give --json (for machines) or --markdown (for a bug report), not both\n"
    assert not (project / ".accelerate").exists()  # changes nothing
