"""A manifest records its files' checksums only in the form accel writes (xxh3_64 and 16
hex digits): any other is no checkpoint, never loaded and never pushed into a sync
index that every later push and pull would refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accel import Workspace
from accel.errors import IntegrityError
from accel.store.hashing import DIGEST_HEX, WRITTEN, checksum_problem, digest_bytes
from accel.store.manifest import parse_manifest, read_manifest

GOOD = "xxh3_64:" + "0123456789abcdef"
NOT_WRITTEN = {
    "an unknown algorithm": "md5:abc",
    "an unknown algorithm, digest of its length": "md5:" + "0" * 32,
    "xxh3_64 with a short digest": "xxh3_64:abc",
    "xxh3_64 with a long digest": "xxh3_64:" + "0" * 17,
    "xxh3_64 in capitals": "xxh3_64:" + "0123456789ABCDEF",
    "xxh3_64 with a sign": "xxh3_64:-123456789abcdef",
    "no algorithm": "nocolon",
    "an empty algorithm": ":" + "0" * 16,
    "a known algorithm accel never writes": "sha256:" + "0" * 64,
}


def _manifest(checksum: str) -> dict[str, object]:
    return {
        "format": 1,
        "series": "default",
        "step": 30,
        "created": 1.5,
        "files": {"state.tensors": {"size": 3, "checksum": checksum}},
    }


def test_the_checksum_accel_writes_is_accepted() -> None:
    assert digest_bytes(b"abc").startswith("xxh3_64:")
    for checksum in (GOOD, digest_bytes(b""), digest_bytes(b"abc")):
        files = parse_manifest(_manifest(checksum), "m", step=30).files
        assert files["state.tensors"].checksum == checksum


@pytest.mark.parametrize("what", sorted(NOT_WRITTEN))
def test_a_checksum_of_another_form_is_no_checkpoint(what: str) -> None:
    with pytest.raises(IntegrityError, match="valid checkpoint manifest.*'state.tensors' has"):
        parse_manifest(_manifest(NOT_WRITTEN[what]), "m", step=30)


@pytest.mark.parametrize("checksum", ["md5:abc", "xxh3_64:abc", "nocolon"])
def test_the_tester_s_checkpoint_is_listed_unreadable_and_never_loaded(
    ws: Workspace, checksum: str
) -> None:
    ckpts = ws.checkpoints
    for step in (10, 20, 30):
        ckpts.save({"w": torch.full((2,), float(step))}, step)
    bad = ckpts.series_dir() / "step-000000000030"
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["files"]["state.tensors"]["checksum"] = checksum
    (bad / "manifest.json").write_text(json.dumps(manifest))
    assert [i.step for i in ckpts.list()] == [10, 20]
    (unreadable,) = ckpts.unreadable()
    assert unreadable.path == bad and "checksum" in unreadable.reason
    with pytest.raises(IntegrityError, match="step-000000000030"):
        ckpts.load(30)
    assert ckpts.load()["w"].tolist() == [20.0, 20.0]
    with pytest.raises(IntegrityError, match="checksum"):
        read_manifest(bad)


def test_what_a_manifest_accepts_a_sync_index_accepts_too() -> None:
    """One rule (accel.store.hashing.checksum_problem): the manifest's allowlist is a
    part of the index's, so no checkpoint the store reads makes a refused index."""
    assert set(WRITTEN) <= set(DIGEST_HEX)
    for checksum in (GOOD, *NOT_WRITTEN.values()):
        if checksum_problem(checksum, WRITTEN) is None:
            assert checksum_problem(checksum) is None


def test_the_sync_index_reader_applies_the_same_rule(tmp_path: Path) -> None:
    from accel.sync._remote import parse_index

    def index(checksum: str) -> bytes:
        files = {"config/accelerate_config.yaml": {"size": 1, "checksum": checksum}}
        return json.dumps({"format": "accel-sync", "version": 1, "files": files}).encode()

    assert parse_index(index(GOOD), "file:///r")
    for checksum in ("md5:abc", "xxh3_64:abc", "nocolon"):
        with pytest.raises(IntegrityError, match="refused"):
            parse_index(index(checksum), "file:///r")
