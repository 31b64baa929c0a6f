__version__ = "0.1.0"

# The distribution's name: what `pip install` takes. `accel` on PyPI is an unrelated
# project, so the package is published as this; `import accel` and the `accel` command
# keep their names. pyproject.toml's [project] name must equal it (tests/test_packaging.py).
DISTRIBUTION = "accel-workspace"
# What a user runs to get a newer accel (a config or workspace written by one).
UPGRADE_HINT = f"pip install -U {DISTRIBUTION}"


def extra(name: str) -> str:
    """The requirement for the optional extra ``name``: ``accel-workspace[name]``."""
    return f"{DISTRIBUTION}[{name}]"


def install_extra(name: str) -> str:
    """The command that installs the optional extra ``name``, quoted for the shell."""
    return f"pip install '{extra(name)}'"
