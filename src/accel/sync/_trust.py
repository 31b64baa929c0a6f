"""What a pull may bring in: files of known kinds in known places; the rest is refused.

Everything read from a remote is data, never code and never a path out of the
workspace. A pull writes only

- ``checkpoints/<series>/step-<12 digits>/<name>``: the files of a checkpoint (its
  manifest says which, and is verified after download);
- ``logs/runs/<run-id>/<known name>``: a run record and the logs accel writes
  (:data:`RUN_FILES`);
- ``cache/entries/.../<key>.entry/<name>``: a cache entry (its ``meta.json`` is verified
  after download);
- ``config/accelerate_config.yaml``: written *aside*, never over the local config, and
  refused when it sets a variable that changes what code runs (:data:`CODE_ENV`) or
  moves the workspace (``workspace.path``).

Anything else the remote lists (a ``sitecustomize.py`` in a run folder, framework caches
holding compiled kernels, ``state.bin``) is refused and listed. Pure: no IO here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from accel.sync._model import FileEntry, Skipped
from accel.sync._paths import CONFIG_REL, split

STEP = re.compile(r"step-[0-9]{12}")
SERIES = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{1,32}")
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
_RANK = r"rank-[0-9]{1,6}"
RUN_FILES = re.compile(
    rf"run\.json|{_RANK}\.log|{_RANK}\.log\.idx|metrics\.jsonl|resources\.jsonl|workers\.json"
    rf"|stacks/{_RANK}\.txt|heartbeats/{_RANK}"
    rf"|tensorboard/{_RANK}/events\.out\.tfevents\.[A-Za-z0-9._-]{{1,200}}"
)
# Variables that choose the code a worker runs (interpreter paths, preloaded libraries,
# compilers, caches of compiled or downloaded code): never taken from a remote's config.
CODE_ENV = frozenset(
    {
        "PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PYTHONEXECUTABLE",
        "PYTHONWARNINGS",
        "PYTHONBREAKPOINT",
        "PYTHONPYCACHEPREFIX",
        "PYTHONPLATLIBDIR",
        "BASH_ENV",
        "ENV",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYLIB",
        "RUBYOPT",
        "NODE_OPTIONS",
        "NODE_PATH",
        "GCONV_PATH",
        "CC",
        "CXX",
        "CPP",
        "LDSHARED",
        "CFLAGS",
        "CXXFLAGS",
        "LDFLAGS",
        "CPATH",
        "LIBRARY_PATH",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "TORCH_EXTENSIONS_DIR",
        "CUDA_CACHE_PATH",
        "TORCH_HOME",
        "HF_HOME",
        "HF_MODULES_CACHE",
    }
)
CODE_ENV_PREFIXES = ("LD_", "DYLD_")


def screen(index: Mapping[str, FileEntry]) -> tuple[dict[str, FileEntry], list[Skipped]]:
    """The entries a pull may consider, and the refused ones with the reason.

    An unsafe path (``..``, absolute, a backslash) still fails the whole pull in
    :func:`~accel.sync._paths.split`: that index is not trusted at all.
    """
    accepted: dict[str, FileEntry] = {}
    refused: list[Skipped] = []
    for rel, entry in index.items():
        reason = refusal(rel)
        if reason is None:
            accepted[rel] = entry
        else:
            refused.append(Skipped(rel, f"refused: {reason}"))
    return accepted, sorted(refused, key=lambda s: s.unit)


def refusal(rel: str) -> str | None:
    """Why ``rel`` may not be pulled (None: it is a known file in a known place)."""
    parts = split(rel)
    if rel == CONFIG_REL:
        return None
    if parts[0] == "checkpoints":
        return _checkpoint_file(parts)
    if parts[:2] == ["logs", "runs"]:
        return _run_file(parts)
    if parts[:2] == ["cache", "entries"]:
        return _cache_file(parts)
    if parts[0] == "cache":
        return "a cache outside cache/entries (framework caches hold compiled code)"
    return "no part of a workspace that sync pulls"


def _checkpoint_file(parts: list[str]) -> str | None:
    ok = (
        len(parts) == 4
        and SERIES.fullmatch(parts[1]) is not None
        and STEP.fullmatch(parts[2]) is not None
        and PLAIN_NAME.fullmatch(parts[3]) is not None
    )
    return None if ok else "not a file of a checkpoint (checkpoints/<series>/step-N/<name>)"


def _run_file(parts: list[str]) -> str | None:
    if len(parts) < 4 or RUN_ID.fullmatch(parts[2]) is None:
        return "not in a run folder (logs/runs/<run-id>/)"
    if RUN_FILES.fullmatch("/".join(parts[3:])) is None:
        return "not a file accel writes in a run folder"
    return None


def _cache_file(parts: list[str]) -> str | None:
    from accel.layout import VERSION_RE
    from accel.store._keys import ENTRY_SUFFIX, key_problem

    entry = next((i for i, p in enumerate(parts) if p.endswith(ENTRY_SUFFIX)), None)
    # <key>.entry/<name>, or <key>.entry/v<16 hex>/<name>: a payload version (store.entry)
    versioned = entry is not None and len(parts) == entry + 3 and VERSION_RE.fullmatch(parts[-2])
    if entry is None or entry < 2 or (len(parts) != entry + 2 and not versioned):
        return "not a file of a cache entry (cache/entries/<key>.entry/[v<version>/]<name>)"
    problem = key_problem("/".join([*parts[2:entry], parts[entry][: -len(ENTRY_SUFFIX)]]))
    if problem is not None:
        return f"not a valid cache key ({problem})"
    return None if PLAIN_NAME.fullmatch(parts[-1]) else "not a plain file name"


def cache_key(unit: str) -> str:
    """The key of the cache entry folder ``unit`` (``cache/entries/<key>.entry``)."""
    return unit.split("/", 2)[2].removesuffix(".entry")


# -- the config ------------------------------------------------------------------------------


def config_refusal(values: Mapping[str, Any]) -> str | None:
    """Why a pulled config (validated, flat values) may not be used here, or None."""
    env = values.get("launch.env") or {}
    code = sorted(n for n in env if n in CODE_ENV or n.startswith(CODE_ENV_PREFIXES))
    if code:
        return (
            f"its launch.env sets {', '.join(code)}, which choose the code workers run; "
            "set them locally if you mean it"
        )
    if values.get("workspace.path"):
        return "it sets workspace.path, a folder outside this workspace"
    return None
