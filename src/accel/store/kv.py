"""The store: small key-value run state shared by all ranks and the CLI.

``state.bin`` holds one JSON object behind a header line with its length and
checksum::

    accel-state 1 <crc32 hex> <body length>\\n
    {"key": value, ...}

Readers take no lock: the file is only ever replaced whole (temp file, fsync,
``os.replace``, folder fsync), so they see the old state or the new one. Writers
serialise on ``locks/state.lock`` and re-read under it (read-modify-write), so no
update is lost. A holder killed mid-update releases the lock with its death (flock).
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from accel._fs import (
    JSON_DEPTH,
    JSON_DIGITS,
    JSON_INT_READ,
    atomic_write,
    json_depth,
    parse_json,
    read_regular,
)
from accel._locks import locked
from accel.config.views import StoreSettings
from accel.errors import IntegrityError, UsageError
from accel.identity import ensure
from accel.layout import STATE_LOCK, Layout

__all__ = ["Store", "decode_state", "encode_state", "json_problem", "read_state", "require_json"]

MAGIC = b"accel-state"
FORMAT = 1
_MISSING: Any = object()
_MAX_BYTES = 1 << 30  # small run state: a store this large is not one
# Updates hold the lock for about a millisecond: waiters that poll every 50 ms (the
# default) leave it idle most of the time. Measured with 4 processes: 1.7x updates/s.
_POLL = 0.001


def _body(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode_state(data: dict[str, Any], body: bytes | None = None) -> bytes:
    """``state.bin``'s bytes for ``data`` (``body``: its JSON, when encoded already)."""
    body = _body(data) if body is None else body
    if json_depth(body) > JSON_DEPTH:  # what the reader would refuse is never written
        raise UsageError(f"the store holds values nested at most {JSON_DEPTH - 1} levels deep")
    header = f"{MAGIC.decode()} {FORMAT} {zlib.crc32(body):08x} {len(body)}\n".encode()
    if len(header) + len(body) > _MAX_BYTES:  # nor what it would refuse as too large
        raise UsageError(
            f"the store would be {len(header) + len(body)} bytes, over its limit of "
            f"{_MAX_BYTES} bytes; keep large data in the cache (ws.cache.put) or a checkpoint"
        )
    return header + body


def decode_state(raw: bytes, source: Path) -> dict[str, Any]:
    """The state in ``raw``; :class:`IntegrityError` when it is not a whole state file."""
    header, _, body = raw.partition(b"\n")
    parts = header.split(b" ")
    if len(parts) != 4 or parts[0] != MAGIC:
        raise _corrupt(source, "it is not an accel state file")
    if parts[1] != str(FORMAT).encode():
        raise IntegrityError(
            f"{source} has state format {parts[1].decode(errors='replace')}, which this accel "
            "does not read; upgrade accel"
        )
    if not parts[3].isdigit() or int(parts[3]) != len(body):
        raise _corrupt(source, "its length does not match its header")
    if f"{zlib.crc32(body):08x}".encode() != parts[2]:
        raise _corrupt(source, "its checksum does not match")
    try:
        data = parse_json(body, source, strict=False)  # values are the user's: any number
    except ValueError as exc:
        raise _corrupt(source, str(exc).removeprefix(f"{source} ").split(";")[0]) from None
    if not isinstance(data, dict):
        raise _corrupt(source, "it does not hold an object")
    return data


def read_state(path: Path) -> dict[str, Any]:
    """The state in the file at ``path``, ``{}`` when there is none; IntegrityError when
    it is not a whole state file (a FIFO, a device, a link, too large, torn)."""
    try:
        raw = read_regular(path, _MAX_BYTES)  # never a FIFO, device or link
    except FileNotFoundError:
        return {}
    return decode_state(raw, path)


def _corrupt(source: Path, why: str) -> IntegrityError:
    return IntegrityError(
        f"{source} is corrupt ({why}); move it aside to start with an empty store"
    )


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key or "\x00" in key:
        raise UsageError(f"invalid store key {key!r}: use a non-empty string")
    return key


class Store:
    """Key-value state in ``state.bin``; every method is safe across processes."""

    def __init__(self, layout: Layout, settings: StoreSettings) -> None:
        self.layout = layout
        self.settings = settings
        self.path = layout.state_file
        self.lock_path = layout.lock(STATE_LOCK)
        self._ensured = False

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # -- reading (no lock: the file is replaced whole) ---------------------------------

    def read(self) -> dict[str, Any]:
        """A snapshot of the whole store."""
        return read_state(self.path)

    def get(self, key: str, default: Any = None) -> Any:
        return self.read().get(_check_key(key), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.read()

    def keys(self) -> list[str]:
        return sorted(self.read())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    # -- writing (lock, re-read, write temp, replace) ----------------------------------

    def set(self, key: str, value: Any) -> None:
        _check_key(key)
        require_json(value, f"store key {key!r}")
        self._modify(lambda data: data.__setitem__(key, value))

    def delete(self, key: str) -> bool:
        """Remove ``key``; False when it was not there."""
        _check_key(key)
        found: list[bool] = []
        self._modify(lambda data: found.append(data.pop(key, _MISSING) is not _MISSING))
        return found[0]

    def update(self, key: str, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """Atomically replace ``key``'s value by ``fn(old)`` (``default`` when absent)."""
        _check_key(key)
        result: list[Any] = []

        def apply(data: dict[str, Any]) -> None:
            new = fn(data.get(key, default))
            require_json(new, f"store key {key!r}")
            data[key] = new
            result.append(new)

        self._modify(apply)
        return result[0]

    def _modify(self, change: Callable[[dict[str, Any]], None]) -> None:
        if not self._ensured:
            ensure(self.layout)
            self._ensured = True
        with locked(self.lock_path, self.settings.lock_timeout, poll_interval=_POLL):
            data = self.read()
            before = _body(data)
            change(data)
            after = _body(data)
            if after != before:
                atomic_write(self.path, encode_state(data, after))


# -- what the store holds: JSON values --------------------------------------------------

_JSON_SCALARS = (str, int, float, bool, type(None))


def json_problem(value: Any, where: str = "value", *, levels: int = JSON_DEPTH - 1) -> str | None:
    """Why ``value`` is not a JSON value (dict/list/str/int/float/bool/None) a reader
    takes back, or None: nested at most ``levels`` deep (the store's own object is one
    level more), containing no container it is in, no integer too wide to read."""
    return _json_problem(value, where, levels, ())


def _json_problem(value: Any, where: str, levels: int, _open: tuple[int, ...]) -> str | None:
    """``_open``: the ids of the containers ``value`` is in; their count is its depth,
    bounded here before any recursion limit is met."""
    if isinstance(value, _JSON_SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            return f"{where} is {value!r}, which JSON cannot represent"
        if isinstance(value, int) and abs(value) >= JSON_INT_READ:
            return f"{where} is an integer of more than {JSON_DIGITS} digits; store hex(n)"
        return None
    if not isinstance(value, (list, dict)):
        return f"{where} is a {type(value).__name__}"
    if id(value) in _open:
        return f"{where} contains itself"
    if len(_open) >= levels:
        return f"{where} is nested more than {levels} levels deep"
    inside = (*_open, id(value))
    items: Iterable[tuple[Any, Any]] = enumerate(value)
    if isinstance(value, dict):
        odd = next((key for key in value if not isinstance(key, str)), _MISSING)
        if odd is not _MISSING:
            return f"{where} has the non-string key {odd!r}"
        items = value.items()
    for key, item in items:
        problem = _json_problem(item, f"{where}[{key!r}]", levels, inside)
        if problem:
            return problem
    return None


def require_json(value: Any, what: str) -> None:
    problem = json_problem(value)
    if problem:
        raise UsageError(
            f"{what}: {problem}; only JSON values (dict with str keys, list, str, int, "
            "finite float, bool, None) can be stored"
        )
