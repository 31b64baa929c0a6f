"""The oldest release pyproject.toml allows of each dependency a user installs, as pins.

    python scripts/dependency_floors.py > floors.txt
    uv pip install ... -c floors.txt

CI's oldest-torch block installs accel's dependencies at these (.ci/run), so every floor
pyproject.toml declares is one the tests have passed on: until stop 52 it said
``typer>=0.26``, and 324 tests failed on 0.26 and 0.27 (no ``typer.exceptions``). The
optional extras a user installs (``accel-workspace[s3]``...) are pinned too: the ``s3``
extra allowed any s3fs, and s3fs 0.4.2 is what a resolver preferring old releases
picked; s3fs before 2023.3 has no ``endpoint_url``, and before 2023.9 its protocol is a
list, which ``accel sync`` took for a crash. ``dev`` is the test tooling, not pinned. A
dependency without a floor (``>=``) is refused: its oldest release is untested.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# name, extras, specifiers, marker: what pyproject.toml's dependencies use
REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*)(?:;.*)?")


UNPINNED_EXTRAS = ("dev",)


def floors(pyproject: Path) -> list[str]:
    """``name==floor`` for each of ``[project] dependencies``, then of each optional extra
    but ``dev``, in their order, each name once."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extras = project.get("optional-dependencies", {})
    requirements = list(project["dependencies"])
    for extra, listed in extras.items():
        if extra not in UNPINNED_EXTRAS:
            requirements += listed
    pins: dict[str, str] = {}
    for requirement in requirements:
        match = REQUIREMENT.fullmatch(requirement)
        if match is None:
            raise ValueError(f"cannot read the requirement {requirement!r}")
        name, specifiers = match.groups()
        lowest = [
            spec.strip()[2:].strip()
            for spec in specifiers.split(",")
            if spec.strip().startswith(">=")
        ]
        if len(lowest) != 1:
            raise ValueError(
                f"{requirement!r} has no floor: give it '>=' the oldest release the tests pass on"
            )
        key = name.lower().replace("_", "-")
        if pins.setdefault(key, f"{name}=={lowest[0]}") != f"{name}=={lowest[0]}":
            raise ValueError(f"{name} has two floors: {pins[key]} and {requirement!r}")
    return list(pins.values())


def main() -> int:
    try:
        pins = floors(Path(__file__).resolve().parent.parent / "pyproject.toml")
    except ValueError as exc:
        print(f"dependency_floors: {exc}", file=sys.stderr)
        return 2
    print("\n".join(pins))
    return 0


if __name__ == "__main__":
    sys.exit(main())
