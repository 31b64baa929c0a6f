"""`accel checkpoints export` on a full disk and onto what is not a file: one line each,
nothing left behind, nothing replaced."""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from accel_runner import cli

from accel._fs import TMP_PREFIX
from accel.workspace import Workspace


@pytest.fixture
def saved(ws: Workspace) -> Workspace:
    torch.manual_seed(0)
    ws.checkpoints.save({"model": torch.nn.Linear(64, 64).state_dict()}, 1)
    return ws


class _FullFile(io.FileIO):
    """A file on a full disk: every write fails as the kernel's does."""

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _full_disk(monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """The export's writes fail with ENOSPC: torch's archive writer sees the failing
    file; safetensors (whose writes are in Rust) fails as it does on a full tmpfs."""
    if fmt == "pt":
        from accel.admin import _writers

        monkeypatch.setattr(_writers, "io", SimpleNamespace(FileIO=_FullFile))
    else:
        import safetensors.torch
        from safetensors import SafetensorError

        def save_file(tensors: Any, path: str, metadata: Any) -> None:
            Path(path).write_bytes(b"half a file")
            raise SafetensorError(
                "Error while serializing: I/O error: No space left on device (os error 28)"
            )

        monkeypatch.setattr(safetensors.torch, "save_file", save_file)


@pytest.mark.parametrize("fmt", ["pt", "safetensors"])
@pytest.mark.parametrize("force", [False, True], ids=["new", "over-an-old-file"])
def test_a_full_disk_is_the_storage_line_and_leaves_no_file(
    saved: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, force: bool
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / f"model.{fmt}"
    if force:
        target.write_bytes(b"the old export")
    _full_disk(monkeypatch, fmt)
    result = cli("checkpoints", "export", "-o", str(target), *(["--force"] if force else []))
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1
    assert f"cannot write {target}: No space left on device; the disk is full" in result.stderr
    assert [p.name for p in out.iterdir()] == (["model." + fmt] if force else [])
    if force:
        assert target.read_bytes() == b"the old export"


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link_to_dev_null(path: Path) -> None:
    path.symlink_to("/dev/null")  # the link is the target here; /dev/null is never touched


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nothing")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_fifo, "is a FIFO"),
        (_link_to_dev_null, "is a character device"),
        (_dangling, "is a link to nothing"),
    ],
    ids=["fifo", "link-to-dev-null", "dangling-link"],
)
def test_force_replaces_only_a_regular_file(
    saved: Workspace, tmp_path: Path, make: Any, says: str
) -> None:
    target = tmp_path / "model.pt"
    make(target)
    before = os.lstat(target)
    link = os.readlink(target) if target.is_symlink() else None
    for force in (["--force"], []):  # without it too: not "pass --force", then refused
        result = cli("checkpoints", "export", "-o", str(target), *force)
        assert result.exit_code == 2, result.output
        said = f"{target} {says}, not a regular file: --force replaces only a file"
        assert said in result.stderr and result.stderr.count("\n") == 1
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert (os.readlink(target) if stat.S_ISLNK(after.st_mode) else None) == link
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)]


def test_a_dash_is_not_a_file_named_dash(saved: Workspace, tmp_path: Path) -> None:
    # `-o -` wrote a file named "-" into the current folder
    result = cli("checkpoints", "export", "-o", "-")
    assert result.exit_code == 2 and "--output - (stdout) is not supported" in result.stderr
    assert not Path("-").exists()


def test_force_replaces_a_link_to_a_regular_file_and_not_its_target(
    saved: Workspace, tmp_path: Path
) -> None:
    real = tmp_path / "real.pt"
    real.write_bytes(b"keep me")
    link = tmp_path / "model.pt"
    link.symlink_to(real)
    result = cli("checkpoints", "export", "-o", str(link), "--force")
    assert result.exit_code == 0, result.output
    assert not link.is_symlink() and real.read_bytes() == b"keep me"
    assert sorted(torch.load(link, weights_only=True)) == ["bias", "weight"]


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(
    ("output", "force"),
    [
        (".accelerate/checkpoints/default/step-000000000001/state.tensors", True),
        (".accelerate/state.bin", True),
        (".accelerate/state.bin", False),
        (".accelerate/checkpoints/default/step-000000000001/model.safetensors", False),
        ("linked/model.safetensors", False),  # a link to a folder of the workspace
        ("data/checkpoints/model.safetensors", True),  # the relocated data folder
    ],
    ids=["own-tensors", "state-bin", "state-bin-no-force", "new-file", "linked", "relocated"],
)
def test_an_output_inside_the_workspace_is_refused_and_nothing_is_written(
    saved: Workspace, project: Path, tmp_path: Path, output: str, force: bool
) -> None:
    if output.startswith("data/"):
        saved.config_file.write_text(f"workspace:\n  path: {project / 'data'}\n")
        moved = Workspace.discover().ensure()
        torch.manual_seed(0)
        moved.checkpoints.save({"model": torch.nn.Linear(4, 4).state_dict()}, 1)
    (project / "linked").symlink_to(saved.checkpoints_dir, target_is_directory=True)
    saved.store.set("k", 1)
    before = _tree(project)
    result = cli("checkpoints", "export", "-o", output, *(["--force"] if force else []))
    assert result.exit_code == 2, result.output
    assert "is inside the workspace" in result.stderr and "outside it" in result.stderr
    assert result.stderr.count("\n") == 1 and "unexpected" not in result.stderr
    assert _tree(project) == before
    assert cli("checkpoints", "verify").exit_code == 0


def test_the_file_to_write_is_taken_where_users_put_it(saved: Workspace, tmp_path: Path) -> None:
    # `export 1 model.safetensors` (as `accelerate merge-weights` and `cp` take a
    # destination) said "Missing option '--output'"; -o stays the documented form
    ws = saved
    torch.manual_seed(1)
    ws.checkpoints.save({"model": torch.nn.Linear(64, 64).state_dict()}, 2)
    for args, step in [
        (("1", "a.safetensors"), 1),
        (("b.safetensors",), 2),  # the file alone: the latest step
        (("latest", "-o", "c.safetensors"), 2),
        (("-o", "d.pt"), 2),
    ]:
        out = tmp_path / args[-1]
        result = cli("checkpoints", "export", *args[:-1], str(out), "--json")
        assert result.exit_code == 0, result.stderr
        assert out.is_file() and f'"step": {step}' in result.stdout
    for args, said in [
        (("1",), "name the file to write: accel checkpoints export [STEP] PATH"),
        ((), "name the file to write"),
        (("1", "e.pt", "-o", "f.pt"), "the file to write is given twice (e.pt and -o f.pt)"),
        (("nostep",), "invalid checkpoint step 'nostep'"),
        (("1.5",), "invalid checkpoint step '1.5'"),  # a typo, not a file to write
    ]:
        result = cli("checkpoints", "export", *args)
        assert result.exit_code == 2 and said in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".pt", ".safetensors")) == [
        "a.safetensors",
        "b.safetensors",
        "c.safetensors",
        "d.pt",
    ]


def test_two_exports_of_a_checkpoint_are_the_same_bytes(saved: Workspace, tmp_path: Path) -> None:
    # safetensors writes its header's __metadata__ in a hash map's order, new in every
    # save (safetensors#584): the same checkpoint exported twice gave different files, so
    # a checksum of a release, a `sync`'s unchanged check or a content-addressed store
    # (DVC, the Hub's LFS) saw a new model each time
    import json

    for suffix in ("safetensors", "pt"):
        files = [tmp_path / f"m{i}.{suffix}" for i in range(8)]
        for out in files:
            assert cli("checkpoints", "export", "1", str(out)).exit_code == 0
        assert len({out.read_bytes() for out in files}) == 1, suffix
    data = files[0].with_suffix(".safetensors").read_bytes()
    header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
    assert list(header["__metadata__"]) == ["accel_series", "accel_step", "format"]
