"""One reader decides what a checkpoint is: a damaged manifest costs only its own
checkpoint, never the series, and clean never ranks or deletes by another rule."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from accel import Workspace
from accel.clean import clean
from accel.errors import IntegrityError
from accel.layout import make_owned_dir
from accel.store.manifest import ManifestMissing, parse_manifest, read_manifest

from . import workers

GOOD_CHECKSUM = "xxh3_64:" + "0" * 16  # the one form a manifest may record


def _state(value: float) -> dict[str, Any]:
    return {"w": torch.full((4,), value)}


def _edit(step_dir: Path, change: Any) -> None:
    manifest = json.loads((step_dir / "manifest.json").read_text())
    change(manifest)
    (step_dir / "manifest.json").write_text(json.dumps(manifest))


DAMAGE = {
    "no created": lambda m: m.pop("created"),
    "created is a string": lambda m: m.update(created="yesterday"),
    "files is a list": lambda m: m.update(files=["state.tensors"]),
    "a file without checksum": lambda m: m["files"]["state.tensors"].pop("checksum"),
    "size is a string": lambda m: m["files"]["state.tensors"].update(size="12"),
    "a file outside": lambda m: m["files"].update(
        {"../../etc/passwd": {"size": 1, "checksum": "x"}}
    ),
    # issue 22: the names are free text in a pulled manifest (OPENSSL_MODULES came this way)
    "a file accel does not write": lambda m: m["files"].update(
        {"libcrypto.so": m["files"]["state.tensors"]}
    ),
    "a file in sharded/ DCP does not write": lambda m: m["files"].update(
        {"sharded/evil.so": m["files"]["state.tensors"]}
    ),
    "a rank file spelt otherwise": lambda m: m["files"].update(
        {"rank-01.tensors": m["files"]["state.tensors"]}
    ),
    "another step": lambda m: m.update(step=99),
    "step is a bool": lambda m: m.update(step=True),
    "tag is a number": lambda m: m.update(tag=5),
    "world_size zero": lambda m: m.update(world_size=0),
    "a newer format": lambda m: m.update(format=2),
    "not an object": lambda m: m.clear(),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_manifest_costs_only_its_own_checkpoint(ws: Workspace, damage: str) -> None:
    ckpts = ws.checkpoints
    for step in (1, 2, 3):
        ckpts.save(_state(step), step)
    bad = ckpts.series_dir() / "step-000000000002"
    if damage == "not an object":
        (bad / "manifest.json").write_text("[]")
    else:
        _edit(bad, DAMAGE[damage])
    assert [i.step for i in ckpts.list()] == [1, 3]
    latest = ckpts.latest()
    assert latest is not None and latest.step == 3
    assert torch.equal(ckpts.load()["w"], torch.full((4,), 3.0))
    assert torch.equal(ckpts.load(1)["w"], torch.full((4,), 1.0))
    with pytest.raises(IntegrityError, match="step-000000000002"):
        ckpts.load(2)
    assert [u.path for u in ckpts.unreadable()] == [bad]
    assert ckpts.debris() == []  # not accel's to delete: it may be a newer accel's


def test_a_newer_format_says_to_upgrade(ws: Workspace) -> None:
    ws.checkpoints.save(_state(1), 1)
    step_dir = ws.checkpoints.series_dir() / "step-000000000001"
    _edit(step_dir, lambda m: m.update(format=7))
    with pytest.raises(IntegrityError, match="format 7, newer than this accel.*upgrade accel"):
        read_manifest(step_dir)
    with pytest.raises(IntegrityError, match="upgrade accel"):
        ws.checkpoints.load(1)


def test_only_twelve_digit_step_folders_are_checkpoints(ws: Workspace) -> None:
    info = ws.checkpoints.save(_state(1), 1)
    assert info is not None
    for name in ("step-99", "step-0000000000001", "step-00000000000x", "Step-000000000001"):
        with pytest.raises(IntegrityError, match="not a checkpoint folder"):
            read_manifest(info.path, name)
    with pytest.raises(ManifestMissing):
        read_manifest(info.path.parent / "step-000000000005")
    assert read_manifest(info.path).step == 1


def test_parse_manifest_is_what_a_pulled_manifest_is_checked_with() -> None:
    good = {
        "format": 1,
        "series": "s",
        "step": 4,
        "created": 1.5,
        "files": {"sharded/__0_0.distcp": {"size": 3, "checksum": GOOD_CHECKSUM}},
    }
    manifest = parse_manifest(good, "pulled", step=4)
    assert manifest.world_size == 1 and manifest.size == 3 and manifest.tag is None
    with pytest.raises(IntegrityError, match="records step 4 but its folder is step 5"):
        parse_manifest(good, "pulled", step=5)
    for name in ("/abs", "a/../b", "", "a\\b", "manifest.json", ".accel-owned", "a//b"):
        bad = {**good, "files": {name: {"size": 1, "checksum": GOOD_CHECKSUM}}}
        with pytest.raises(IntegrityError, match="valid checkpoint manifest"):
            parse_manifest(bad, "pulled")


OURS = ("state.tensors", "rank-0.tensors", "rank-1023.tensors", "sharded/.metadata")
NOT_OURS = (
    "model.pt",
    "libcrypto.so",
    "openssl.cnf",
    "state.tensors/x",
    "rank-01.tensors",
    "rank--1.tensors",
    "rank-1.tensors.so",
    "sharded/evil.so",
    "sharded/__0.metadata",
    "sharded/__0_0.distcp/x",
    "sharded/__0_0.distcp.so",
    "sharded/.metadata\n",
    "sharded/sub/__0_0.distcp",
    "./state.tensors",
    "\x1b]0;title\x07",
)


def test_a_manifest_lists_only_the_files_accel_writes() -> None:
    """An allowlist of names (accel.store.manifest.FILE_NAME), for every reader."""
    entry = {"size": 1, "checksum": GOOD_CHECKSUM}
    base = {"format": 1, "series": "s", "step": 4, "created": 1.5}
    names = (*OURS, "sharded/__0_0.distcp", "sharded/__15_3.distcp")
    assert set(parse_manifest({**base, "files": dict.fromkeys(names, entry)}, "m").files) == set(
        names
    )
    for name in NOT_OURS:
        with pytest.raises(IntegrityError, match="is not a file accel writes"):
            parse_manifest({**base, "files": {name: entry}}, "pulled")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_clean_ranks_only_readable_checkpoints_and_leaves_the_rest_alone(
    ws: Workspace, fork: multiprocessing.context.BaseContext
) -> None:
    """The issue's case: a step-99 folder, a newer format and a copied folder beside two
    valid steps; ``--keep-last 1`` must keep the newest valid one and delete none of
    the others."""
    ckpts = ws.checkpoints
    for step in (1, 2, 5):  # saved by a process that is gone: the series is free
        child = workers.process(fork, workers.save_in_child, str(ws.path), step, {})
        child.start()
        assert workers.finish(child) == 0
    folder = ckpts.series_dir()
    (folder / "step-99").mkdir()
    (folder / "step-99" / "manifest.json").write_text(json.dumps({"format": 1, "step": 99}))
    _edit(folder / "step-000000000005", lambda m: m.update(format=2))  # a newer accel's
    copied = folder / "step-000000000007"
    copied.mkdir()
    (copied / "manifest.json").write_text(
        (folder / "step-000000000001" / "manifest.json").read_text()
    )
    outcome = clean(ws, keep_last=1, now=time.time() + 30 * 86400)
    assert [i.step for i in ckpts.list()] == [2]
    assert ckpts.load()["step"] == 2
    removed = [p.item.path.name for p in outcome.plan.items]
    assert removed == ["step-000000000001"]
    left = {k.item.path.name: k.reason for k in outcome.plan.kept}
    assert left["step-000000000002"] == "newest checkpoint"
    assert left["step-99"] == "unknown, left alone"
    for name in ("step-000000000005", "step-000000000007"):
        assert left[name] == "unreadable, left alone" and (folder / name).exists()


def test_an_owned_staging_folder_with_a_bad_manifest_is_debris(ws: Workspace) -> None:
    ws.checkpoints.save(_state(1), 1)
    stage = make_owned_dir(ws.checkpoints.series_dir() / ".tmp-000000000002-0123456789ab")
    (stage / "manifest.json").write_text("{")
    assert ws.checkpoints.debris() == [stage]
    assert [i.step for i in ws.checkpoints.list()] == [1]
