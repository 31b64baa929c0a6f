"""torchrun's ``--redirects``, ``--tee`` and ``--log-dir`` under accel (fast: no process).

The rules are checked against torch's own ``DefaultLogsSpecs`` for the installed release;
the files against what accel's log router writes, redaction and restarts included."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

# Imported at collection: a CUDA build's first `import torch` runs ldconfig, which the
# fast lane's guard would take for a process the test started.
from torch.distributed.elastic.multiprocessing import Std
from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs

from accel.errors import UsageError
from accel.runs.logs import LogRouter
from accel.runs.streams import Piece
from accel.runs.torchrun_logs import STDERR, STDOUT, LogMirror, Streams, TorchrunLogs

VALUES = [None, "0", "1", "2", "3", "0:3", "1:2", "0:1,1:2", "0:3,1:0,2:1", "3:3"]


def torchruns(tmp_path: Path, redirects: str | None, tee: str | None, nproc: int) -> Any:
    """What torch's DefaultLogsSpecs makes of the two flags for ``nproc`` local ranks."""
    specs = DefaultLogsSpecs(
        log_dir=str(tmp_path / "torchrun"),
        redirects=Std.from_str(redirects) if redirects is not None else Std.NONE,
        tee=Std.from_str(tee) if tee is not None else Std.NONE,
    )
    envs = {i: {"TORCHELASTIC_RUN_ID": "job", "RANK": str(i)} for i in range(nproc)}
    return specs.reify(envs)


@pytest.mark.parametrize("redirects", VALUES)
@pytest.mark.parametrize("tee", VALUES)
def test_which_streams_go_where_is_torchruns(
    tmp_path: Path, redirects: str | None, tee: str | None
) -> None:
    """A file for each stream either flag names; off the console when redirected and not
    tee'd (torchrun's console is the worker's own stream, or a tail of the tee'd file)."""
    dest = torchruns(tmp_path, redirects, tee, nproc=4)
    ours = TorchrunLogs.parse("logs", redirects, tee, tmp_path)
    for local in range(4):
        for stream, files, teed in (
            (STDOUT, dest.stdouts, dest.tee_stdouts),
            (STDERR, dest.stderrs, dest.tee_stderrs),
        ):
            to_file = bool(files[local])
            assert ours.to_file(local, stream) == to_file, (local, stream)
            assert ours.on_console(local, stream) == (not to_file or local in teed)
            if to_file:  # torchrun's layout: <log dir>/<run id>_<random>/attempt_0/<rank>/
                parts = Path(files[local]).relative_to(tmp_path / "torchrun").parts
                assert parts[0].startswith("job_")
                assert parts[1:] == ("attempt_0", str(local), f"{stream}.log")


@pytest.mark.parametrize("text", ["4", "", " 3", "3,", "0:4", "x", "0:3,", "10:3", "-1"])
def test_a_value_torchrun_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Std.from_str(text)
    with pytest.raises(UsageError, match="invalid value for --redirects: expected 0 to 3"):
        Streams.parse("--redirects", text)


@pytest.mark.parametrize(("redirects", "tee"), [("3", None), ("0:3", "1:1"), (None, "3")])
def test_log_dir_dev_null_is_torchruns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redirects: str | None, tee: str | None
) -> None:
    """torchrun's ``--log-dir /dev/null`` writes no file and leaves every stream on the
    console, whatever --redirects says (a first version took them off it)."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # should torch make a folder
    specs = DefaultLogsSpecs(
        log_dir=os.devnull,
        redirects=Std.from_str(redirects) if redirects is not None else Std.NONE,
        tee=Std.from_str(tee) if tee is not None else Std.NONE,
    )
    dest = specs.reify({i: {"TORCHELASTIC_RUN_ID": "job", "RANK": str(i)} for i in range(2)})
    ours = TorchrunLogs.parse(os.devnull, redirects, tee, tmp_path)
    assert ours.log_dir is None
    for local in range(2):
        for stream, files in ((STDOUT, dest.stdouts), (STDERR, dest.stderrs)):
            assert files[local] == ""  # torchrun's console
            assert ours.on_console(local, stream) and not ours.to_file(local, stream)


def test_the_log_dir_is_absolute_and_checked(tmp_path: Path) -> None:
    logs = TorchrunLogs.parse("a/b", None, "3", tmp_path)
    assert logs.log_dir == tmp_path / "a" / "b"
    workspace, data = tmp_path / ".accelerate", tmp_path / "data"  # workspace.path moved it
    owned = (workspace, data)
    logs.check(owned)  # a folder to make, outside the workspace
    assert not (tmp_path / "a").exists()  # checking makes nothing
    for inside in (".accelerate", ".accelerate/logs/x", "data", "data/logs"):
        with pytest.raises(UsageError, match="inside the workspace"):
            TorchrunLogs.parse(inside, None, None, tmp_path).check(owned)
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is a file; give a folder"):
        TorchrunLogs.parse("file/logs", None, None, tmp_path).check(owned)
    (tmp_path / "link").symlink_to(workspace, target_is_directory=True)
    workspace.mkdir()
    with pytest.raises(UsageError, match="inside the workspace"):  # through a link too
        TorchrunLogs.parse("link/logs", None, None, tmp_path).check(owned)


def feed(router: LogRouter, local: int, stream: str, data: bytes) -> None:
    fd = os.open(router._paths[(local, stream)], os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class Console:
    def __init__(self) -> None:
        self.seen: list[tuple[int, str, bytes]] = []

    def __call__(self, rank: int, stream: str, piece: Piece) -> None:
        self.seen.append((rank, stream, piece.data))

    def redraw_every(self, stream: str) -> float:
        return 1.0


def test_the_router_writes_torchruns_files_per_attempt(tmp_path: Path) -> None:
    """Redirected streams leave the console; the files hold each attempt's output, the
    secrets hidden; the rank logs keep everything."""
    run_dir, fifos = tmp_path / "run", tmp_path / "fifos"
    run_dir.mkdir()
    fifos.mkdir()
    logs = TorchrunLogs.parse("logs", "3", "0:1", tmp_path)
    console = Console()
    router = LogRouter(
        run_dir, fifos, 2, console, lambda rank: True, secrets=["s3cret"], torchrun=logs
    )
    router.start(LogMirror(logs, "job/1"))  # a rendezvous id is no path
    try:
        router.begin_attempt({0: 0, 1: 1}, 0)
        feed(router, 0, STDOUT, b"step 1 key=s3cret\n")
        feed(router, 0, STDERR, b"warning 0\n")
        feed(router, 1, STDOUT, b"rank 1 out\n")
        feed(router, 1, STDERR, b"progress 50%\rprogress 100%\n")
        router.begin_attempt({0: 0, 1: 1}, 1)  # drains the first attempt
        feed(router, 1, STDOUT, b"after the restart\n")
    finally:
        router.close()
    (root,) = (tmp_path / "logs").iterdir()
    assert root.name.startswith("job_1_")
    files = {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }
    assert files == {
        "attempt_0/0/stderr.log": b"warning 0\n",
        "attempt_0/0/stdout.log": b"step 1 key=***\n",
        "attempt_0/1/stderr.log": b"progress 50%\rprogress 100%\n",
        "attempt_0/1/stdout.log": b"rank 1 out\n",
        "attempt_1/0/stderr.log": b"",
        "attempt_1/0/stdout.log": b"",
        "attempt_1/1/stderr.log": b"",
        "attempt_1/1/stdout.log": b"after the restart\n",
    }
    assert console.seen == [(0, STDOUT, b"step 1 key=***")]  # tee 0:1: rank 0's stdout
    rank1 = (run_dir / "rank-1.log").read_text()
    assert "rank 1 out" in rank1 and "after the restart" in rank1 and "progress 100%" in rank1


def test_a_log_dir_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    logs = TorchrunLogs.parse("file/logs", "3", None, tmp_path)
    with pytest.raises(UsageError, match=r"--log-dir .*file/logs: cannot make a folder there"):
        LogMirror(logs, "job")


def test_a_full_disk_ends_the_file_not_the_run(tmp_path: Path) -> None:
    """A write that fails (ENOSPC on /dev/full) closes that file; nothing is raised into
    the log pump, and the other files go on."""
    logs = TorchrunLogs.parse("logs", "3", None, tmp_path)
    mirror = LogMirror(logs, "job")
    mirror.begin_attempt(0, [0])
    full = open("/dev/full", "ab")  # noqa: SIM115 - the mirror closes it
    mirror._files[(0, STDOUT)] = full
    mirror.write((0, STDOUT), b"x" * 10)
    mirror.write((0, STDERR), b"still here\n")
    assert full.closed and (0, STDOUT) not in mirror._files
    mirror.close()
    (err,) = (tmp_path / "logs").glob("job_*/attempt_0/0/stderr.log")
    assert err.read_bytes() == b"still here\n"


def torch_tail(tmp_path: Path, data: bytes, header: str, needles: list[str]) -> bytes | None:
    """What torchrun's tail of a tee'd file writes to its filtered file; None on a torch
    without ``--duplicate-*-filters`` (2.7+)."""
    import inspect
    import io
    import threading

    from torch.distributed.elastic.multiprocessing.tail_log import tail_logfile

    if "log_line_filter" not in inspect.signature(tail_logfile).parameters:
        return None
    path = tmp_path / "teed.log"
    path.write_bytes(data)
    out, finished = io.StringIO(), threading.Event()
    finished.set()  # the worker is done: read to the end, once
    tail_logfile(
        header, str(path), out, finished, 0.0, lambda line: any(n in line for n in needles)
    )
    return out.getvalue().encode("utf-8")


@pytest.mark.parametrize(
    "data",
    [
        b"loss 1\nstep 2\nother\nloss 3",  # the last line unended
        b"progress 10%\rprogress 100% loss\r\nloss\r\rx loss\n",
        b"loss \xff\xfe bytes\nno\n",  # not UTF-8: replaced, as torchrun's reader does
        b"",
        b"a,b loss\n,\n",
    ],
)
def test_the_filtered_lines_are_those_of_torchruns_tail(tmp_path: Path, data: bytes) -> None:
    """A tee'd stream cut into lines as torchrun's text reader cuts it (``\\r`` ends one),
    fed in pieces of every size: the lines it keeps, headed as it heads them."""
    needles = ["loss", "a,b"]
    expected = torch_tail(tmp_path, data, "[default0]:", needles)
    if expected is None:
        pytest.skip("this torch has no --duplicate-*-filters")
    from accel.runs.torchrun_logs import _Lines

    for size in (1, 2, 3, 7, len(data) or 1):
        lines = _Lines("[default0]:", tuple(needles))
        pieces = [data[i : i + size] for i in range(0, len(data), size)]
        got = b"".join(lines.feed(piece) for piece in pieces) + lines.feed(b"", end=True)
        assert got == expected, size


def test_filters_are_split_as_torchrun_splits_them() -> None:
    from torch.distributed.run import get_args_parser

    from accel.runs.torchrun_logs import filters

    parser = get_args_parser()
    if not any(a.dest == "duplicate_stdout_filters" for a in parser._actions):
        pytest.skip("this torch has no --duplicate-*-filters")
    for text in ("loss,step", "a,,b", "", ",", "a,,,b", ",,", "x,,,,y,"):
        theirs = parser.parse_args(["--duplicate-stdout-filters", text, "t.py"])
        assert filters(text) == tuple(theirs.duplicate_stdout_filters), text
    assert filters(None) is None


@pytest.mark.parametrize("shown", [None, frozenset({0}), frozenset({1, 3})])
@pytest.mark.parametrize(("redirects", "tee"), [(None, "3"), ("3", "0:1,2:3"), (None, None)])
def test_the_ranks_that_feed_the_filtered_file_are_torchruns(
    tmp_path: Path, shown: frozenset[int] | None, redirects: str | None, tee: str | None
) -> None:
    """torchrun tails the tee'd files of the local ranks its console shows; only those."""
    specs = DefaultLogsSpecs(
        log_dir=str(tmp_path / "torchrun"),
        redirects=Std.from_str(redirects) if redirects is not None else Std.NONE,
        tee=Std.from_str(tee) if tee is not None else Std.NONE,
        local_ranks_filter=set(shown) if shown is not None else None,
    )
    dest = specs.reify({i: {"TORCHELASTIC_RUN_ID": "job", "RANK": str(i)} for i in range(4)})
    ours = TorchrunLogs.parse(
        "logs", redirects, tee, tmp_path, duplicate=("loss", "Error"), shown=shown
    )
    for local in range(4):
        assert ours.duplicated(local, STDOUT) == (local in dest.tee_stdouts), local
        assert ours.duplicated(local, STDERR) == (local in dest.tee_stderrs), local
    if hasattr(dest, "filtered_stdout"):  # torch 2.7+: where the file goes
        assert Path(dest.filtered_stdout).name == "filtered_stdout.log"
        assert Path(dest.filtered_stdout).parent.name == "attempt_0"
    without_dir = TorchrunLogs.parse(None, redirects, tee, tmp_path, duplicate=("loss", None))
    assert not any(without_dir.duplicated(local, STDOUT) for local in range(4))


def test_the_router_writes_the_filtered_files_per_attempt(tmp_path: Path) -> None:
    """Every tee'd rank's matching lines in one file per attempt, headed by the template,
    the secrets hidden; a rank not tee'd and a stream without filters add nothing."""
    run_dir, fifos = tmp_path / "run", tmp_path / "fifos"
    run_dir.mkdir()
    fifos.mkdir()
    logs = TorchrunLogs.parse(
        "logs",
        None,
        "0:3,1:1",
        tmp_path,
        duplicate=("loss,,x,step", None),
        prefix="[${role_name}|${rank}|${local_rank}]: ",
    )
    router = LogRouter(
        run_dir, fifos, 3, Console(), lambda rank: True, secrets=["s3cret"], torchrun=logs
    )
    router.start(LogMirror(logs, "job", role="trainer"))
    try:
        router.begin_attempt({0: 4, 1: 5, 2: 6}, 0)
        feed(router, 0, STDOUT, b"step 1 key=s3cret\nnothing\n")
        feed(router, 0, STDERR, b"step on stderr\n")  # no stderr filters: no file
        feed(router, 2, STDOUT, b"step 1 on rank 2\n")  # not tee'd
        feed(router, 1, STDOUT, b"loss,x 0.5\nloss 0.5\n")
        router.begin_attempt({0: 0, 1: 1, 2: 2}, 1)
        feed(router, 1, STDOUT, b"step 9 after the restart")  # unended: the close ends it
    finally:
        router.close()
    (root,) = (tmp_path / "logs").iterdir()
    first = (root / "attempt_0" / "filtered_stdout.log").read_text().splitlines()
    assert sorted(first) == [
        "[trainer|4|0]: step 1 key=***",
        "[trainer|5|1]: loss,x 0.5",
    ]
    assert (root / "attempt_1" / "filtered_stdout.log").read_text() == (
        "[trainer|1|1]: step 9 after the restart\n"  # ended as in the rank's own files
    )
    assert not list(root.rglob("filtered_stderr.log"))


def test_a_line_that_never_ends_is_held_back_bounded() -> None:
    """A worker that prints megabytes without a newline: what is held back for the
    filter stays under a bound, and the line is judged in pieces as it comes."""
    from accel.runs.torchrun_logs import _Lines

    lines = _Lines("[default0]:", ("loss",))
    kept = b"".join(lines.feed(b"loss " + b"x" * 65536) for _ in range(48))
    assert len(lines._rest) <= 1 << 20
    assert kept.startswith(b"[default0]:loss xxx") and len(kept) > 2 << 20
