"""The name pip knows accel by (issue 24): `accel` on PyPI is an unrelated project.

Every hint that tells users to install accel (messages, docstrings, docs, the README)
must name the distribution in pyproject.toml, which is ``accel._version.DISTRIBUTION``;
and the metadata stays in the form setuptools builds without deprecation warnings.
Read from the text, no subprocess: the build itself is scripts/wheel-check.sh.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from accel._version import DISTRIBUTION, UPGRADE_HINT, extra, install_extra
from tests_paths import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    tomllib = pytest.importorskip("tomli")

# `pip install` and what follows it (one line break allowed: prose wraps): quoted
# arguments whole, bare ones up to a shell operator, a backtick or a quote.
PIP_INSTALL = re.compile(
    r"""\bpip3?\s+install((?:[ \t]*\n?[ \t]*(?:'[^'\n]*'|"[^"\n]*"|[^\s`&;|()'"]+))*)"""
)
ARGUMENT = re.compile(r"""'[^'\n]*'|"[^"\n]*"|[^\s`&;|()'"]+""")
REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# An extra of the plain name, `accel[plot]`, wherever it is (not accel-workspace[plot],
# not a path such as accel[/\\]launch in a regex).
PLAIN_EXTRA = re.compile(r"(?<![\w./\\-])accel\[[A-Za-z][\w,-]*\]")
OUR_EXTRA = re.compile(re.escape(DISTRIBUTION) + r"\[([\w,-]+)\]")


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_names(text: str) -> list[str]:
    """The distributions each ``pip install`` in ``text`` names, normalized."""
    names = []
    for command in PIP_INSTALL.finditer(text):
        for argument in ARGUMENT.findall(command.group(1)):
            argument = argument.strip("'\"").rstrip(",:;")
            if argument.startswith("-"):
                continue
            found = REQUIREMENT_NAME.match(argument)
            if found:
                names.append(normalized(found.group()))
    return names


def wrong_hints(text: str) -> list[str]:
    """What in ``text`` tells users to install the plain name ``accel``."""
    wrong = [f"pip install {n}" for n in installed_names(text) if n == "accel"]
    return wrong + PLAIN_EXTRA.findall(text)


def user_facing_files() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "src").rglob("*.py")),
    ]


@pytest.mark.parametrize(
    ("text", "wrong"),
    [
        ("upgrade accel (pip install -U accel) to read it", True),
        ("`pip install 'accel[plot]'`", True),
        ('pip install "accel[s3]>=0.1"', True),
        ("pip install\n'accel[plot]'`.", True),
        ("needs a backend: install accel[s3]", True),
        ("pip install --upgrade Accel", True),
        (f"pip install -U {DISTRIBUTION}", False),
        (f"pip install '{DISTRIBUTION}[plot]'", False),
        ("pip install torch==2.13.0 -e . && accel launch -n 2 examples/train.py", False),
        ("pip install accelerate && python make_corpus.py", False),
        (r'r"[/\\]accel[/\\]launch[/\\]_bootstrap\.py"', False),
    ],
)
def test_the_scan_tells_the_plain_name_from_the_real_one(text: str, wrong: bool) -> None:
    assert bool(wrong_hints(text)) is wrong, wrong_hints(text)


def test_no_file_tells_users_to_install_the_plain_name() -> None:
    found = []
    for path in user_facing_files():
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(ROOT)}: {hint!r}" for hint in wrong_hints(text)]
    assert found == [], f"`accel` on PyPI is another project; say {DISTRIBUTION}: {found}"


def test_the_hints_name_the_distribution_pyproject_builds() -> None:
    project = pyproject()["project"]
    assert project["name"] == DISTRIBUTION
    assert normalized(DISTRIBUTION) != "accel"
    assert installed_names(UPGRADE_HINT) == [normalized(DISTRIBUTION)]
    for name in project["optional-dependencies"]:
        assert install_extra(name) == f"pip install '{extra(name)}'"
        assert installed_names(install_extra(name)) == [normalized(DISTRIBUTION)]


def test_every_extra_a_hint_names_exists() -> None:
    extras = set(pyproject()["project"]["optional-dependencies"])
    for path in [*user_facing_files(), ROOT / "CHANGELOG.md"]:
        for named in OUR_EXTRA.findall(path.read_text(encoding="utf-8")):
            if named != "name":  # the placeholder in _version.py's docstring
                assert set(named.split(",")) <= extras, f"{path.relative_to(ROOT)}: {named}"


def test_the_metadata_is_in_the_form_setuptools_builds_without_warnings() -> None:
    data = pyproject()
    project = data["project"]
    assert project["license"] == "Apache-2.0"  # an SPDX expression, not a table
    assert project["license-files"] == ["LICENSE"] and (ROOT / "LICENSE").is_file()
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]
    (setuptools,) = [r for r in data["build-system"]["requires"] if r.startswith("setuptools")]
    assert setuptools == "setuptools>=77"  # the first to read PEP 639's license fields
    assert project["scripts"] == {"accel": "accel.cli:run"}


def _dependency_floors() -> Any:
    spec = importlib.util.spec_from_file_location(
        "_dependency_floors", ROOT / "scripts" / "dependency_floors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_runtime_dependency_has_a_floor_the_oldest_ci_block_installs() -> None:
    """pyproject.toml said ``typer>=0.26`` while the CLI needed 0.28 (stop 52): a floor
    nothing installs is a guess. CI's oldest block pins every one (.ci/run), and the
    floors of the extras a user installs (``[s3]`` allowed any s3fs: one without
    ``endpoint_url``, or whose protocol list ``accel sync`` took for a crash)."""
    project = pyproject()["project"]
    pins = _dependency_floors().floors(ROOT / "pyproject.toml")
    named = dict(pin.split("==") for pin in pins)
    extras = project["optional-dependencies"]
    users = [r for extra, listed in extras.items() if extra != "dev" for r in listed]
    for requirement in [*project["dependencies"], *users]:
        assert requirement.split(">=")[0].split("[")[0] in named, requirement
    assert len(pins) == len(set(named))
    assert named["typer"] == "0.28" and named["torch"] == "2.6"
    assert named["s3fs"] == named["fsspec"] == "2023.3"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"OLDEST_TORCH={named['torch']}.0" in ci
    assert 'scripts/dependency_floors.py >"$scratch/floors.txt"' in ci
    assert 'torch_venv "$OLDEST_TORCH" "$(python_for "$OLDEST_PYTHON")" "$scratch/floors.txt"' in ci


def test_an_extra_is_pinned_once_and_one_without_a_floor_is_refused(tmp_path: Path) -> None:
    floors = _dependency_floors().floors
    project = tmp_path / "pyproject.toml"
    project.write_text(
        '[project]\ndependencies = ["numpy>=1.24"]\n[project.optional-dependencies]\n'
        'dev = ["pytest", "fsspec"]\nsync = ["fsspec>=2023.3"]\n'
        's3 = ["fsspec>=2023.3", "s3fs>=2023.3"]\n',
        encoding="utf-8",
    )
    assert floors(project) == ["numpy==1.24", "fsspec==2023.3", "s3fs==2023.3"]
    project.write_text(
        '[project]\ndependencies = []\n[project.optional-dependencies]\ns3 = ["s3fs"]\n',
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="has no floor"):
        floors(project)
    project.write_text(
        '[project]\ndependencies = ["fsspec>=2023.3"]\n[project.optional-dependencies]\n'
        'sync = ["fsspec>=2024.1"]\n',
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="two floors"):
        floors(project)


@pytest.mark.parametrize(
    ("requirement", "pin"),
    [
        ("typer>=0.28,<0.29", "typer==0.28"),
        ("numpy >= 1.24", "numpy==1.24"),
        ("pkg[extra]>=2 ; python_version < '3.12'", "pkg==2"),
        ("typer<0.29", None),
        ("typer", None),
        ("typer~=0.28", None),
    ],
)
def test_a_floor_is_read_and_a_dependency_without_one_is_refused(
    tmp_path: Path, requirement: str, pin: str | None
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        f"[project]\ndependencies = [{requirement!r}]\n", encoding="utf-8"
    )
    floors = _dependency_floors().floors
    if pin is None:
        with pytest.raises(ValueError, match="has no floor"):
            floors(tmp_path / "pyproject.toml")
    else:
        assert floors(tmp_path / "pyproject.toml") == [pin]
