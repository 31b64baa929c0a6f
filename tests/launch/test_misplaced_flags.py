"""`accel launch train.py -n 2`: everything after the script is the script's, as under
torchrun, so the script's argparse refuses `-n 2` and the run fails with exit code 2.
accel says which of the refused words are its own options, and where they go."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from accel.cli._launch_report import _misplaced

Accel = Callable[..., subprocess.CompletedProcess[str]]
OURS = {"-n", "--nproc-per-node", "--max-restarts", "--preload"}


@pytest.mark.parametrize(
    ("tail", "found"),
    [
        (["usage: train.py [-h]", "train.py: error: unrecognized arguments: -n 2"], ["-n"]),
        (
            ["train.py: error: unrecognized arguments: --max-restarts=1 --bogus"],
            ["--max-restarts=1"],
        ),
        (["train.py: error: unrecognized arguments: -n 2 --preload"], ["-n", "--preload"]),
        (["train.py: error: unrecognized arguments: --bogus"], []),
        (["train.py: error: argument --steps: invalid int value: '-n'"], []),
        ([], []),
    ],
)
def test_only_our_options_that_argparse_refused_are_named(
    tail: list[str], found: list[str]
) -> None:
    assert _misplaced(tail, OURS) == found


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_launch_option_after_the_script_is_named_and_placed(accel: Accel, project: Path) -> None:
    script = project / "train.py"
    script.write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--steps')\n"
        "p.parse_args()\n",
        encoding="utf-8",
    )
    done = accel("launch", "train.py", "-n", "2", "--steps", "3")
    assert done.returncode == 1, done.stderr
    assert (
        "accel: -n came after the script, so the script got it: accel launch's options go "
        "before the script (accel launch [OPTIONS] SCRIPT [ARGS]...)"
    ) in done.stderr.splitlines(), done.stderr
    done = accel("launch", "train.py", "--bogus")  # the script's own mistake: no note
    assert done.returncode == 1, done.stderr
    assert "came after the script" not in done.stderr, done.stderr
