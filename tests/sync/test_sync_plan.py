"""The planners and path rules, without a filesystem."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel._redact import redact_url
from accel.errors import IntegrityError, UsageError
from accel.sync._model import CHECKPOINT, RUN, FileEntry, LocalFile
from accel.sync._paths import kind_of, split, unit_of
from accel.sync._plan import LocalView, needs_checksum, plan_pull, plan_push
from accel.sync._remote import parse_storage_options, storage_options_for

CK = "checkpoints/default/step-000000000002"


def local(rel: str, size: int, checksum: str | None, kind: str = CHECKPOINT) -> LocalFile:
    return LocalFile(rel, Path("/ws") / rel, size, checksum, unit_of(rel), kind)


def test_push_moves_new_and_changed_files_markers_last() -> None:
    files = [
        local(f"{CK}/manifest.json", 10, "xxh3_64:m"),
        local(f"{CK}/state.pt", 100, "xxh3_64:s"),
        local("logs/runs/r1/rank-0.log", 5, None, RUN),
        local("logs/runs/r1/run.json", 7, "xxh3_64:same", RUN),
    ]
    remote = {
        "logs/runs/r1/rank-0.log": FileEntry(4, "xxh3_64:old"),
        "logs/runs/r1/run.json": FileEntry(7, "xxh3_64:same"),
    }
    plan = plan_push(files, remote)
    assert [t.rel for t in plan.transfers] == [
        f"{CK}/state.pt",
        f"{CK}/manifest.json",
        "logs/runs/r1/rank-0.log",
    ]
    assert [t.reason for t in plan.transfers] == ["new", "new", "changed"]
    assert plan.unchanged == 1 and plan.total_bytes == 115
    assert [u for u, _ in plan.units()] == [CK, "logs/runs/r1"]


def test_only_same_size_files_are_hashed_before_a_push() -> None:
    files = [local("config/accelerate_config.yaml", 9, None, "config")]
    assert needs_checksum(files, {}) == []
    assert needs_checksum(files, {files[0].rel: FileEntry(8, "xxh3_64:a")}) == []
    assert needs_checksum(files, {files[0].rel: FileEntry(9, "xxh3_64:a")}) == [files[0].rel]


def test_pull_skips_what_is_here_keeps_conflicts_and_live_runs() -> None:
    remote = {
        f"{CK}/state.pt": FileEntry(100, "xxh3_64:s"),
        f"{CK}/manifest.json": FileEntry(10, "xxh3_64:m"),
        "checkpoints/default/step-000000000003/state.pt": FileEntry(100, "xxh3_64:t"),
        "checkpoints/default/step-000000000003/manifest.json": FileEntry(10, "xxh3_64:n"),
        "logs/runs/live/run.json": FileEntry(3, "xxh3_64:l"),
        "config/accelerate_config.yaml": FileEntry(9, "xxh3_64:c"),
        "cache/entries/k.entry/meta.json": FileEntry(2, "xxh3_64:k"),
    }
    here = LocalView(
        files={
            f"{CK}/state.pt": FileEntry(100, "xxh3_64:s"),
            f"{CK}/manifest.json": FileEntry(10, "xxh3_64:m"),
            "config/accelerate_config.yaml": FileEntry(9, "xxh3_64:mine"),
        },
        units={CK},
        live_runs={"live"},
    )
    plan = plan_pull(remote, here, include_cache=False)
    assert [t.rel for t in plan.transfers] == [
        "checkpoints/default/step-000000000003/state.pt",
        "checkpoints/default/step-000000000003/manifest.json",
        "config/accelerate_config.yaml",  # another config: pulled aside, never over ours
    ]
    assert {s.unit: s.reason for s in plan.skipped} == {"logs/runs/live": "live run here"}
    assert plan.unchanged == 2
    with_cache = plan_pull(remote, here, include_cache=True)
    assert "cache/entries/k.entry/meta.json" in {t.rel for t in with_cache.transfers}


def test_a_different_checkpoint_with_the_same_step_is_kept() -> None:
    remote = {f"{CK}/manifest.json": FileEntry(10, "xxh3_64:theirs")}
    here = LocalView({f"{CK}/manifest.json": FileEntry(10, "xxh3_64:mine")}, units={CK})
    plan = plan_pull(remote, here, include_cache=False)
    assert not plan.transfers and plan.skipped[0].unit == CK


@pytest.mark.parametrize(
    "rel",
    [
        "../outside",
        "checkpoints/../../x",
        "/etc/passwd",
        "logs/runs/r/../../../x",
        "checkpoints/s/.tmp-1/state.pt",
        "locks/state.lock",
        "state.bin",
        "logs/training.log",
        "cache\\..\\x",
        "",
    ],
)
def test_unsafe_or_foreign_remote_paths_are_refused(rel: str) -> None:
    with pytest.raises(IntegrityError):
        kind_of(rel)


def test_units() -> None:
    assert unit_of(f"{CK}/state.pt") == CK
    assert unit_of("logs/runs/r1/rank-0.log") == "logs/runs/r1"
    assert unit_of("cache/entries/ns/k.entry/meta.json") == "cache/entries/ns/k.entry"
    assert unit_of("cache/frameworks/inductor/x.py") == "cache/frameworks/inductor/x.py"
    assert split("config/accelerate_config.yaml") == ["config", "accelerate_config.yaml"]


def test_urls_are_shown_without_credentials() -> None:
    assert redact_url("s3://AKIA:s3cr3t@bucket/p") == "s3://***@bucket/p"
    shown = redact_url("https://host/p?X-Amz-Signature=abc&part=1")
    assert "abc" not in shown and "part=1" in shown
    assert redact_url("file:///tmp/r") == "file:///tmp/r"


def test_storage_options_and_the_endpoint_from_the_environment() -> None:
    opts = parse_storage_options(["anon=true", "endpoint_url=http://127.0.0.1:9", "n=3"])
    assert opts == {"anon": True, "endpoint_url": "http://127.0.0.1:9", "n": 3}
    with pytest.raises(UsageError):
        parse_storage_options(["novalue"])
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}
    assert storage_options_for("s3", {}, env) == {"endpoint_url": "http://127.0.0.1:1"}
    assert storage_options_for("file", {}, env) == {}
    assert storage_options_for("s3", {"endpoint_url": "x"}, env) == {"endpoint_url": "x"}
