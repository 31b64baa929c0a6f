"""torchrun's ``--log-dir``, ``--redirects`` and ``--tee`` under ``accel launch``.

torchrun sends each local rank's stdout (1) and stderr (2), chosen by ``--redirects``
(0 to 3 for every rank, or ``LOCAL_RANK:N`` pairs like ``0:3,1:1``), into files instead
of the console; ``--tee`` (same values) writes the files and keeps the console. The
files lie under ``--log-dir`` in torchrun's layout::

    <log-dir>/<rdzv-id>_<random>/attempt_<restart>/<local rank>/stdout.log, stderr.log

accel keeps every stream of every rank in ``rank-N.log`` whatever these flags say; they
change what they change under torchrun: a stream redirected and not tee'd is off the
console, and with ``--log-dir`` the redirected and tee'd streams are also written there,
redacted as accel's own logs are. (Without ``--log-dir`` torchrun writes them to a
temporary folder; accel's rank logs are that place. With ``--log-dir /dev/null`` it
writes none and every stream stays on the console.) A worker's ``error.json``, which
torchrun also keeps there, stays accel's: the traceback is in the rank's log.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from accel._fs import open_private_append
from accel.errors import UsageError
from accel.runs.streams import STDERR, STDOUT

_BITS = {STDOUT: 1, STDERR: 2}  # torchrun's Std: 0 none, 1 stdout, 2 stderr, 3 both
# torchrun's names of each rank's two files (its layout, not accel's: accel.layout's own
# rank logs end in .log too)
_THEIR_FILES = {STDOUT: "stdout.log", STDERR: "stderr.log"}
# torchrun's own check (torch.distributed.elastic.multiprocessing.api.Std.from_str)
_SPEC = re.compile(r"[0-3]|(\d:[0-3],)*\d:[0-3]")


@dataclass(frozen=True)
class Streams:
    """One ``--redirects`` or ``--tee`` value: which streams of each local rank."""

    every: int = 0  # a single value: every local rank's
    ranks: Mapping[int, int] | None = None  # LOCAL_RANK:N pairs; a rank not named: 0

    @classmethod
    def parse(cls, flag: str, text: str | None) -> Streams:
        if text is None:
            return cls()
        if not _SPEC.fullmatch(text):
            raise UsageError(
                f"invalid value for {flag}: expected 0 to 3 (none, stdout, stderr, both) or "
                f"LOCAL_RANK:N pairs like 0:3,1:1, as torchrun takes, got {text!r}"
            )
        if ":" not in text:
            return cls(every=int(text))
        pairs = (pair.split(":") for pair in text.split(","))
        return cls(ranks={int(rank): int(value) for rank, value in pairs})

    def has(self, local: int, stream: str) -> bool:
        bits = self.every if self.ranks is None else self.ranks.get(local, 0)
        return bool(bits & _BITS[stream])


@dataclass(frozen=True)
class TorchrunLogs:
    """What ``--log-dir``, ``--redirects`` and ``--tee`` asked for, checked."""

    log_dir: Path | None = None  # absolute
    redirects: Streams = field(default_factory=Streams)
    tee: Streams = field(default_factory=Streams)

    @classmethod
    def parse(
        cls, log_dir: str | None, redirects: str | None, tee: str | None, cwd: Path
    ) -> TorchrunLogs:
        folder = None
        if log_dir is not None:
            if not log_dir.strip() or "\0" in log_dir:
                raise UsageError(f"invalid value for --log-dir: expected a folder, got {log_dir!r}")
            folder = Path(os.path.abspath(cwd / Path(log_dir).expanduser()))
        streams = Streams.parse("--redirects", redirects), Streams.parse("--tee", tee)
        if str(folder) == os.devnull:  # torchrun then writes no file and redirects nothing
            return cls()
        return cls(folder, *streams)

    def on_console(self, local: int, stream: str) -> bool:
        """A stream redirected is off the console, unless it is tee'd too."""
        return not self.redirects.has(local, stream) or self.tee.has(local, stream)

    def to_file(self, local: int, stream: str) -> bool:
        """torchrun writes a file for each stream redirected or tee'd."""
        redirected = self.redirects.has(local, stream) or self.tee.has(local, stream)
        return self.log_dir is not None and redirected

    def check(self, owned: Iterable[Path]) -> None:
        """Where the files would go is a folder, or can be one, outside the folders the
        workspace owns (its root and its data folder, which ``workspace.path`` may move),
        links resolved."""
        if self.log_dir is None:
            return
        said = f"--log-dir {self.log_dir}"
        inside = Path(os.path.realpath(self.log_dir))
        for folder in dict.fromkeys(Path(os.path.realpath(p)) for p in owned):
            if inside == folder or folder in inside.parents:
                raise UsageError(
                    f"{said}: that is inside the workspace, where accel keeps every rank's "
                    "log already (`accel logs`); give a folder outside it"
                )
        existing = next(p for p in (self.log_dir, *self.log_dir.parents) if p.exists())
        if not existing.is_dir():
            raise UsageError(f"{said}: {existing} is a file; give a folder")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(f"{said}: {existing} is not writable; give a folder you can write")


class LogMirror:
    """torchrun's files under ``--log-dir``: the pieces accel's logs get, as they come."""

    def __init__(self, logs: TorchrunLogs, rdzv_id: str) -> None:
        assert logs.log_dir is not None
        self.logs = logs
        prefix = re.sub(r"[^A-Za-z0-9._-]", "_", rdzv_id)[:64] + "_"
        try:
            logs.log_dir.mkdir(parents=True, exist_ok=True)
            self.root = Path(tempfile.mkdtemp(prefix=prefix, dir=logs.log_dir))
        except OSError as exc:
            raise UsageError(
                f"--log-dir {logs.log_dir}: cannot make a folder there ({exc.strerror}); give "
                "a folder you can write"
            ) from None
        self._files: dict[tuple[int, str], BinaryIO] = {}

    def begin_attempt(self, restart: int, local_ranks: Iterable[int]) -> None:
        """Each attempt's files in a folder of its own, as torchrun's."""
        self.close()
        for local in local_ranks:
            folder = self.root / f"attempt_{restart}" / str(local)
            try:  # every rank's folder, as torchrun makes them (for its error.json)
                folder.mkdir(parents=True, exist_ok=True)
            except OSError:  # a folder it cannot write: the rank's log has it all
                continue
            for stream in (STDOUT, STDERR):
                if self.logs.to_file(local, stream):
                    self._open((local, stream), folder / _THEIR_FILES[stream])

    def write(self, key: tuple[int, str], data: bytes) -> None:
        fh = self._files.get(key)
        if fh is None or not data:
            return
        try:
            fh.write(data)
            fh.flush()
        except OSError:  # a full disk there: that file ends, accel's own log goes on
            self._close(self._files.pop(key))

    def close(self) -> None:
        for fh in self._files.values():
            self._close(fh)
        self._files.clear()

    @staticmethod
    def _close(fh: BinaryIO) -> None:
        with contextlib.suppress(OSError):  # what a full disk left in its buffer is lost
            fh.close()

    def _open(self, key: tuple[int, str], path: Path) -> None:
        try:  # closed by close()
            self._files[key] = open(open_private_append(path), "ab")  # noqa: SIM115
        except OSError:  # a file it cannot write: the rank's log has it
            pass
