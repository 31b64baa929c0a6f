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

``--duplicate-stdout-filters loss,step`` (and ``--duplicate-stderr-filters``) copy each
line of a tee'd stream that holds one of the strings (``,,`` is a comma) into one file
per attempt for all ranks, ``attempt_<restart>/filtered_stdout.log``, each line headed
``[<role><local rank>]:`` or by ``--log-line-prefix-template``, as torchrun's tail of the
tee'd files does: a rank its ``--local-ranks-filter`` leaves off the console is left out,
and a ``\r`` ends a line there (torchrun reads the files as text).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import string
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
# the file of each stream's --duplicate-*-filters lines, one per attempt (torchrun's)
_FILTERED = {STDOUT: "filtered_stdout.log", STDERR: "filtered_stderr.log"}
_LINE_END = re.compile(rb"\r\n|\r|\n")  # a text file's, as torchrun's tail reads them
FILTERED = -1  # the local rank in the filtered files' keys: they hold every rank's lines
_LONGEST = 1 << 20  # a line held back no longer (a worker that never ends one: bounded)


def filters(text: str | None) -> tuple[str, ...] | None:
    """``--duplicate-stdout-filters 'a,b,,c'`` -> ('a', 'b,c'): torchrun's
    ``comma_separated_list`` (``,,`` is a comma); None when not given."""
    if text is None:
        return None
    return tuple(item.replace("\0", ",") for item in text.replace(",,", "\0").split(","))


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
    # --duplicate-stdout-filters, --duplicate-stderr-filters (None: no file)
    stdout_filters: tuple[str, ...] | None = None
    stderr_filters: tuple[str, ...] | None = None
    shown: frozenset[int] | None = None  # --local-ranks-filter: None, every local rank
    prefix: str | None = None  # --log-line-prefix-template

    @classmethod
    def parse(
        cls,
        log_dir: str | None,
        redirects: str | None,
        tee: str | None,
        cwd: Path,
        *,
        duplicate: tuple[str | None, str | None] = (None, None),
        shown: frozenset[int] | None = None,
        prefix: str | None = None,
    ) -> TorchrunLogs:
        folder = None
        if log_dir is not None:
            if not log_dir.strip() or "\0" in log_dir:
                raise UsageError(f"invalid value for --log-dir: expected a folder, got {log_dir!r}")
            folder = Path(os.path.abspath(cwd / Path(log_dir).expanduser()))
        streams = Streams.parse("--redirects", redirects), Streams.parse("--tee", tee)
        if str(folder) == os.devnull:  # torchrun then writes no file and redirects nothing
            return cls()
        out, err = (filters(text) for text in duplicate)
        return cls(folder, *streams, out, err, shown, prefix or None)

    def on_console(self, local: int, stream: str) -> bool:
        """A stream redirected is off the console, unless it is tee'd too."""
        return not self.redirects.has(local, stream) or self.tee.has(local, stream)

    def to_file(self, local: int, stream: str) -> bool:
        """torchrun writes a file for each stream redirected or tee'd."""
        redirected = self.redirects.has(local, stream) or self.tee.has(local, stream)
        return self.log_dir is not None and redirected

    def filtered(self, stream: str) -> tuple[str, ...] | None:
        """The strings of ``--duplicate-<stream>-filters`` where there is a file for them."""
        if self.log_dir is None:
            return None
        return self.stdout_filters if stream == STDOUT else self.stderr_filters

    def duplicated(self, local: int, stream: str) -> bool:
        """Whether a local rank's stream feeds the filtered file: torchrun tails the tee'd
        files of the ranks its console shows."""
        return (
            bool(self.filtered(stream))
            and self.tee.has(local, stream)
            and (self.shown is None or local in self.shown)
        )

    def header(self, local: int, rank: int, role: str) -> str:
        """What heads a rank's lines in the filtered files (torchrun's tail); ``role``:
        the workers' (``--role``)."""
        if not self.prefix:
            return f"[{role}{local}]:"
        return string.Template(self.prefix).safe_substitute(
            role_name=role, rank=rank, local_rank=local, hostname=socket.gethostname()
        )

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

    def __init__(self, logs: TorchrunLogs, rdzv_id: str, role: str = "default") -> None:
        assert logs.log_dir is not None
        self.logs = logs
        self.role = role  # the workers' (--role), in the filtered files' headers
        prefix = re.sub(r"[^A-Za-z0-9._-]", "_", rdzv_id)[:64] + "_"
        try:
            logs.log_dir.mkdir(parents=True, exist_ok=True)
            self.root = Path(tempfile.mkdtemp(prefix=prefix, dir=logs.log_dir))
        except OSError as exc:
            raise UsageError(
                f"--log-dir {logs.log_dir}: cannot make a folder there ({exc.strerror}); give "
                "a folder you can write"
            ) from None
        # each file by what it holds: (local rank, stream), or (FILTERED, stream)
        self._files: dict[tuple[int, str], BinaryIO] = {}
        self._lines: dict[tuple[int, str], _Lines] = {}  # the filtered files' sources

    def begin_attempt(self, restart: int, ranks: Mapping[int, int]) -> None:
        """Each attempt's files in a folder of its own, as torchrun's; ``ranks`` maps the
        attempt's local ranks to their global ranks."""
        self.close()
        attempt = self.root / f"attempt_{restart}"
        for local in ranks:
            folder = attempt / str(local)
            try:  # every rank's folder, as torchrun makes them (for its error.json)
                folder.mkdir(parents=True, exist_ok=True)
            except OSError:  # a folder it cannot write: the rank's log has it all
                continue
            for stream in (STDOUT, STDERR):
                if self.logs.to_file(local, stream):
                    self._open((local, stream), folder / _THEIR_FILES[stream])
        for stream, name in _FILTERED.items():
            needles = self.logs.filtered(stream)
            if not needles or not attempt.is_dir():
                continue
            self._open((FILTERED, stream), attempt / name)  # made empty, as torchrun's
            for local, rank in ranks.items():
                if self.logs.duplicated(local, stream):
                    self._lines[local, stream] = _Lines(
                        self.logs.header(local, rank, self.role), needles
                    )

    def write(self, key: tuple[int, str], data: bytes) -> None:
        if not data:
            return
        self._write(key, data)
        lines = self._lines.get(key)
        if lines is not None:
            self._write((FILTERED, key[1]), lines.feed(data))

    def close(self) -> None:
        for (_, stream), lines in self._lines.items():  # a last line left unended
            self._write((FILTERED, stream), lines.feed(b"", end=True))
        self._lines.clear()
        for fh in self._files.values():
            self._close(fh)
        self._files.clear()

    def _write(self, key: tuple[int, str], data: bytes) -> None:
        fh = self._files.get(key)
        if fh is None or not data:
            return
        try:
            fh.write(data)
            fh.flush()
        except OSError:  # a full disk there: that file ends, accel's own log goes on
            self._close(self._files.pop(key))

    @staticmethod
    def _close(fh: BinaryIO) -> None:
        with contextlib.suppress(OSError):  # what a full disk left in its buffer is lost
            fh.close()

    def _open(self, key: tuple[int, str], path: Path) -> None:
        try:  # closed by close()
            self._files[key] = open(open_private_append(path), "ab")  # noqa: SIM115
        except OSError:  # a file it cannot write: the rank's log has it
            pass


class _Lines:
    """One rank's stream cut into the lines torchrun's tail reads (text: a ``\\r`` ends
    one too), those holding one of the strings kept, headed."""

    def __init__(self, header: str, needles: tuple[str, ...]) -> None:
        self.header = header
        self.needles = needles
        self._rest = b""

    def feed(self, data: bytes, *, end: bool = False) -> bytes:
        data, kept, start = self._rest + data, [], 0
        for match in _LINE_END.finditer(data):
            if match.group() == b"\r" and match.end() == len(data) and not end:
                break  # perhaps the first half of a \r\n
            kept.append(self._keep(data[start : match.start()] + b"\n"))
            start = match.end()
        self._rest = data[start:]
        if (end or len(self._rest) > _LONGEST) and self._rest:  # as torchrun's tail finds it
            kept.append(self._keep(self._rest))
            self._rest = b""
        return b"".join(kept)

    def _keep(self, raw: bytes) -> bytes:
        line = raw.decode("utf-8", errors="replace")  # torchrun's: errors="replace"
        if not any(needle in line for needle in self.needles):
            return b""
        return (self.header + line).encode("utf-8")
