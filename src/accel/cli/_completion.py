"""Shell completion for bash, zsh and fish.

``accel --show-completion [SHELL]`` prints the script, ``accel --install-completion
[SHELL]`` installs it (the shell's usual place, and a line in its rc file). typer does
the work: its scripts, and its completion classes answering the shell's requests
(``_ACCEL_COMPLETE=complete_bash accel``). accel adds the choice of the shell by name
(else the shell it runs in, else ``$SHELL``) and registers the completion classes only
when a shell asks for completions, so no other start-up pays for them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from accel.errors import UsageError

PROG = "accel"
COMPLETE_VAR = "_ACCEL_COMPLETE"
SHELLS = ("bash", "zsh", "fish")
AUTO = "auto"


def requested(env: Mapping[str, str]) -> bool:
    """Whether this process answers a shell's completion request."""
    return COMPLETE_VAR in env


def prepare() -> None:
    """typer's completion classes (rich help in zsh and fish) replace click's."""
    # typer.completion re-exports these without __all__; typer is pinned (pyproject).
    from typer.completion import completion_init  # type: ignore[attr-defined]

    completion_init()


def pick(value: str | None, env: Mapping[str, str]) -> str:
    """The shell named, else the one this runs in, else ``$SHELL``; bash, zsh or fish."""
    shell = value if value and value != AUTO else _detect(env)
    if shell not in SHELLS:
        raise UsageError(
            f"no completion for the shell {shell or '(unknown)'!r}: name one of "
            f"{', '.join(SHELLS)}, e.g. `accel --show-completion bash`"
        )
    return shell


def _detect(env: Mapping[str, str]) -> str:
    try:
        import shellingham  # type: ignore[import-untyped]  # typer's own dependency

        name, _ = shellingham.detect_shell()
        return str(name)
    except Exception:  # noqa: BLE001 - no shell among the parents: ask $SHELL
        return os.path.basename(env.get("SHELL", ""))


def script(shell: str) -> str:
    from typer.completion import get_completion_script  # type: ignore[attr-defined]

    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell)


def install(shell: str) -> Path:
    from typer.completion import install as typer_install  # type: ignore[attr-defined]

    _, path = typer_install(shell=shell, prog_name=PROG, complete_var=COMPLETE_VAR)
    return Path(path)
