"""Shell completion for bash, zsh and fish, through the installed `accel` as shells call it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A torch that cannot be imported: completion must never load it."""
    shim = tmp_path / "shim" / "torch"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "__init__.py").write_text("raise ImportError('torch imported by completion')\n")
    path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(shim.parent)]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def _run(exe: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*exe, *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_prints_the_script_for_the_shell_named(
    accel_exe: list[str], tmp_path: Path, shell: str
) -> None:
    done = _run(accel_exe, _env(tmp_path), "--show-completion", shell)
    assert done.returncode == 0, done.stderr
    assert f"_ACCEL_COMPLETE=complete_{shell}" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_an_unknown_shell_is_one_line_and_exit_2(accel_exe: list[str], tmp_path: Path) -> None:
    done = _run(accel_exe, _env(tmp_path), "--show-completion", "tcsh")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: no completion for the shell 'tcsh': name one of bash, zsh, fish, "
        "e.g. `accel --show-completion bash`"
    ]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_zsh_and_fish_get_commands_and_their_help(accel_exe: list[str], tmp_path: Path) -> None:
    zsh = _run(
        accel_exe,
        _env(tmp_path, _ACCEL_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS="accel runs s"),
    )
    assert zsh.returncode == 0 and '"show":"Summary' in zsh.stdout
    fish = _run(
        accel_exe,
        _env(
            tmp_path,
            _ACCEL_COMPLETE="complete_fish",
            _TYPER_COMPLETE_FISH_ACTION="get-args",
            _TYPER_COMPLETE_ARGS="accel con",
        ),
    )
    assert fish.returncode == 0 and fish.stdout.startswith("config\t")


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_install_completion_for_bash_completes_in_a_real_bash(
    accel_exe: list[str], tmp_path: Path
) -> None:
    home = Path(os.environ["HOME"])  # the test's own (tests/conftest.py)
    env = _env(tmp_path)
    done = _run(accel_exe, env, "--install-completion", "bash")
    assert done.returncode == 0, done.stderr
    script = home / ".bash_completions" / "accel.sh"
    assert f"bash completion installed in {script}" in done.stdout
    assert str(script) in (home / ".bashrc").read_text()
    env["PATH"] = f"{Path(accel_exe[0]).parent}{os.pathsep}{env['PATH']}"
    words = {
        "accel la": ("1", "launch"),
        "accel runs sh": ("2", "show"),
        "accel --ver": ("1", "--version"),
    }
    for line, (cword, expected) in words.items():
        probe = (
            f"source {script}; COMP_WORDS=({line}); COMP_CWORD={cword}; "
            '_accel_completion accel; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        shell = subprocess.run(
            ["bash", "-c", probe], capture_output=True, text=True, timeout=60, env=env
        )
        assert shell.stdout.split() == [expected], (line, shell.stdout, shell.stderr)
