"""What a pull may bring in: files of known kinds in known places; the rest is refused.

Everything read from a remote is data, never code and never a path out of the
workspace. A pull writes only

- ``checkpoints/<series>/step-<12 digits>/<name>``: the files of a checkpoint, by the
  names a manifest may list (:data:`accel.store.manifest.FILE_NAME`, ``sharded/`` DCP
  files included) and the manifest itself, which is verified after download;
- ``logs/runs/<run-id>/<known name>``: a run record and the logs accel writes
  (:data:`accel.layout.RUN_FILE_RE`);
- ``cache/entries/.../<key>.entry/<name>``: a cache entry (its ``meta.json`` is verified
  after download);
- ``config/accelerate_config.yaml``: written *aside*, never over the local config; applied
  only when asked, and then only the keys of :data:`CONFIG_CARRIED` (an allowlist).

Anything else the remote lists (a ``sitecustomize.py`` in a run folder, framework caches
holding compiled kernels, ``state.bin``) is refused and listed. Pure: no IO here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from accel.layout import (
    CACHE_DIR,
    CHECKPOINTS_DIR,
    CONFIG_REL,
    ENTRIES_REL,
    ENTRY_SUFFIX,
    RUN_FILE_RE,
    RUNS_REL,
    SERIES_RE,
    STEP_RE,
)
from accel.sync._model import FileEntry, Skipped
from accel.sync._paths import is_checkpoint_file, is_debris, split

RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{1,32}")
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")


def screen(index: Mapping[str, FileEntry]) -> tuple[dict[str, FileEntry], list[Skipped]]:
    """The entries a pull may consider, and the refused ones with the reason.

    An unsafe path (``..``, absolute, a backslash) still fails the whole pull in
    :func:`~accel.sync._paths.split`: that index is not trusted at all. A hidden, temp or
    lock name (``.gitignore``, ``locks/state.lock``) is only refused, like any unknown name.
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
    if any(is_debris(p) for p in parts) and not is_checkpoint_file(parts):
        return "a hidden, temp or lock name, which sync never moves"
    if parts[0] == CHECKPOINTS_DIR:
        return _checkpoint_file(parts)
    if parts[:2] == RUNS_REL.split("/"):
        return _run_file(parts)
    if parts[:2] == ENTRIES_REL.split("/"):
        return _cache_file(parts)
    if parts[0] == CACHE_DIR:
        return "a cache outside cache/entries (framework caches hold compiled code)"
    return "no part of a workspace that sync pulls"


def _checkpoint_file(parts: list[str]) -> str | None:
    from accel.layout import MANIFEST

    ok = (
        len(parts) >= 4
        and SERIES_RE.fullmatch(parts[1]) is not None
        and STEP_RE.fullmatch(parts[2]) is not None
        and (parts[3:] == [MANIFEST] or is_checkpoint_file(parts))
    )
    return None if ok else "not a file of a checkpoint (checkpoints/<series>/step-N/<name>)"


def _run_file(parts: list[str]) -> str | None:
    if len(parts) < 4 or RUN_ID.fullmatch(parts[2]) is None:
        return "not in a run folder (logs/runs/<run-id>/)"
    if RUN_FILE_RE.fullmatch("/".join(parts[3:])) is None:
        return "not a file accel writes in a run folder"
    return None


def _cache_file(parts: list[str]) -> str | None:
    from accel.layout import VERSION_RE
    from accel.store.entry import key_problem

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
    return unit.split("/", 2)[2].removesuffix(ENTRY_SUFFIX)


# -- the config ------------------------------------------------------------------------------

# The keys a pulled config may carry (``--apply-config``): how a run goes, as numbers,
# switches and fixed choices that cannot name code, a module, a file, a host or a
# credential. Every other key keeps its local value; the reason is in CONFIG_KEPT, and a
# key new to the schema is in neither set and is left out until someone classifies it
# (tests/sync/test_sync_trust.py::test_every_config_key_is_classified_for_a_pull).
CONFIG_CARRIED = frozenset(
    {
        "launch.num_processes",
        "launch.num_machines",
        "launch.min_machines",
        "launch.max_restarts",
        "launch.mixed_precision",
        "launch.use_cpu",
        "launch.run_name",
        "launch.fsdp",
        "launch.fsdp_wrap",
        "launch.fsdp_layer_classes",  # compared with the model's class names, never imported
        "launch.fsdp_min_params",
        "launch.fsdp_reshard_after_forward",
        "launch.stop_grace_period",
        "launch.hang_timeout",
        "launch.hang_action",
        "checkpoints.keep_last",
        "checkpoints.async_save",
        "checkpoints.collective_timeout",
        "checkpoints.arrival_timeout",
        "checkpoints.snapshot_every",  # shared memory for two or three snapshots a rank
        "checkpoints.persist_every",
        "cache.max_size",
        "logs.level",
        "logs.rotate_max_bytes",
        "logs.backup_count",
        "logs.resource_interval",
        "logs.on_nonfinite",
        "store.lock_timeout",
    }
)
_CODE = "it chooses the code workers run"
CONFIG_KEPT: Mapping[str, str] = {
    "launch.env": (
        "environment variables choose code, endpoints and credentials "
        "(OPENSSL_CONF, HF_ENDPOINT, HTTPS_PROXY, NCCL_NET_PLUGIN, ...)"
    ),
    "launch.preload": f"{_CODE} (a template process that imports modules)",
    "launch.preload_modules": f"{_CODE} (modules imported before the script)",
    "launch.dynamo_backend": f"{_CODE} (a torch.compile backend)",
    "cache.framework_caches": "it chooses where frameworks load compiled and downloaded code",
    "launch.rdzv_endpoint": "it chooses the host this machine connects to",
    "launch.rdzv_id": "it names the job at the rendezvous host",
    "launch.machine_rank": "it belongs to this machine",
    "launch.gpu_ids": "it names this machine's devices",
    "workspace.path": "it moves the workspace to a folder outside it",
}


def config_left_out(key: str) -> str | None:
    """Why a pulled config's ``key`` keeps its local value (None: the pull carries it)."""
    if key in CONFIG_CARRIED:
        return None
    return CONFIG_KEPT.get(key, "it is not on the list of keys a pull may carry")
