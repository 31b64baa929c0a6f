"""The key-value store: atomic read-modify-write across processes, SIGKILL-safe."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from accel import Workspace
from accel.errors import AccelError, IntegrityError, LockTimeout, UsageError
from accel.store.kv import decode_state, encode_state

from . import workers


def test_get_set_delete_update(ws: Workspace) -> None:
    store = ws.store
    assert store.get("missing") is None
    assert store.get("missing", 7) == 7
    store.set("a", {"x": [1, 2.5, "s", None, True]})
    assert store.get("a") == {"x": [1, 2.5, "s", None, True]}
    assert "a" in store and "b" not in store
    assert store.update("n", lambda v: v + 1, default=0) == 1
    assert store.update("n", lambda v: v + 1, default=0) == 2
    assert store.keys() == ["a", "n"]
    assert store.delete("a") is True
    assert store.delete("a") is False
    assert Workspace.discover().store.read() == {"n": 2}


@pytest.mark.parametrize(
    "value", [object(), (1, 2), {1: "int key"}, float("nan"), b"bytes", {"a": {3}}]
)
def test_non_json_values_are_refused_and_change_nothing(ws: Workspace, value: Any) -> None:
    ws.store.set("k", 1)
    with pytest.raises(UsageError, match="JSON"):
        ws.store.set("k", value)
    with pytest.raises(UsageError, match="JSON"):
        ws.store.update("k", lambda _: value)
    assert ws.store.get("k") == 1


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _looped() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (_nested(64), re.escape("value" + "[0]" * 63 + " is nested more than 63 levels deep")),
        (_nested(3000), "is nested more than 63 levels deep"),  # was a RecursionError
        (_looped(), r"value\[0\] contains itself"),  # a RecursionError too
        ({"a": {"b": _looped()}}, r"value\['a'\]\['b'\]\[0\] contains itself"),
        (10**5000, r"is an integer of more than 4300 digits; store hex\(n\)"),  # a ValueError
        (-(10**4300), "is an integer of more than 4300 digits"),
    ],
    ids=["64-levels", "3000-levels", "itself", "itself-inside", "10**5000", "negative"],
)
def test_values_no_reader_could_read_back_are_refused_and_change_nothing(
    ws: Workspace, value: Any, said: str
) -> None:
    """One UsageError, not a RecursionError or a ValueError from json; and a process
    that lifted Python's integer limit cannot write a state.bin every other reads as
    corrupt."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # lifted in this process: json.dumps would write it
    try:
        _refused(ws, value, said)
    finally:
        sys.set_int_max_str_digits(limit)


def _refused(ws: Workspace, value: Any, said: str) -> None:
    ws.store.set("k", 1)
    with pytest.raises(UsageError, match=said):
        ws.store.set("k", value)
    with pytest.raises(UsageError, match=said):
        ws.store.update("k", lambda _: value)
    assert ws.store.get("k") == 1
    ws.store.set("k", _nested(63))  # the deepest the store reads back
    assert Workspace.discover().store.get("k") == _nested(63)
    ws.store.set("k", 10**4300 - 1)  # 4300 digits: what a reader reads
    assert Workspace.discover().store.get("k") == 10**4300 - 1


@pytest.mark.parametrize("key", ["", None, 3, "a\x00b"])
def test_bad_keys_are_refused(ws: Workspace, key: Any) -> None:
    with pytest.raises(UsageError, match="store key"):
        ws.store.set(key, 1)


def test_a_failing_update_function_changes_nothing(ws: Workspace) -> None:
    ws.store.set("k", 1)

    def boom(_: Any) -> Any:
        raise RuntimeError("user bug")

    with pytest.raises(RuntimeError):
        ws.store.update("k", boom)
    assert ws.store.get("k") == 1


def test_state_file_is_checksummed(ws: Workspace) -> None:
    ws.store.set("k", "value")
    raw = ws.state_file.read_bytes()
    assert decode_state(raw, ws.state_file) == {"k": "value"}
    assert raw == encode_state({"k": "value"})
    ws.state_file.write_bytes(raw.replace(b"value", b"valuf"))
    with pytest.raises(IntegrityError, match="checksum"):
        ws.store.get("k")
    ws.state_file.write_bytes(raw[:-3])
    with pytest.raises(IntegrityError, match="length"):
        ws.store.get("k")


def test_a_store_too_large_to_read_back_is_never_written(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel.store import kv

    ws.store.set("important", {"step": 1})
    before = ws.state_file.read_bytes()
    limit = len(before) + 40  # the limit the reader applies, small enough to reach
    monkeypatch.setattr(kv, "_MAX_BYTES", limit)
    for change in (
        lambda: ws.store.set("blob", ["y" * 30] * 2),
        lambda: ws.store.update("blob", lambda _: "y" * 60),
    ):
        with pytest.raises(UsageError, match=f"over its limit of {limit} bytes") as info:
            change()
        assert "\n" not in str(info.value)
        assert ws.state_file.read_bytes() == before
    assert ws.store.get("important") == {"step": 1}
    fits = "y" * (limit - len(encode_state({"blob": "", "important": {"step": 1}})))
    ws.store.set("blob", fits)  # exactly the limit: written, and read back
    assert ws.state_file.stat().st_size == limit
    assert Workspace.discover().store.get("blob") == fits


def test_reading_creates_nothing(project: Path) -> None:
    ws = Workspace.discover()
    assert ws.store.get("k") is None
    assert not ws.path.exists()


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_lock_timeout_names_the_lock_file(
    ws: Workspace, fork: multiprocessing.context.BaseContext
) -> None:
    ready = fork.Event()
    child = workers.process(fork, workers.hold_store_lock, str(ws.path), ready, 30)
    child.start()
    try:
        assert ready.wait(10)
        impatient = Workspace(ws.path, env={"ACCEL_STORE_LOCK_TIMEOUT": "0.2s"})
        with pytest.raises(LockTimeout, match=r"locks/state\.lock") as info:
            impatient.store.set("k", "mine")
        assert isinstance(info.value, AccelError)
        assert ws.store.get("k") is None
    finally:
        child.kill()
        child.join()


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_a_holder_killed_mid_update_does_not_block_the_next(
    ws: Workspace, fork: multiprocessing.context.BaseContext
) -> None:
    ws.store.set("k", "before")
    ready = fork.Event()
    child = workers.process(fork, workers.hold_store_lock, str(ws.path), ready, 60)
    child.start()
    assert ready.wait(10)
    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    child.join()
    assert ws.store.get("k") == "before"
    patient = Workspace(ws.path, env={"ACCEL_STORE_LOCK_TIMEOUT": "5s"})
    assert patient.store.update("k", lambda v: v + " after") == "before after"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_no_lost_update_with_four_processes(
    ws: Workspace, fork: multiprocessing.context.BaseContext
) -> None:
    children = [workers.process(fork, workers.increment, str(ws.path), 250) for _ in range(4)]
    for child in children:
        child.start()
    assert [workers.finish(child, 100) for child in children] == [0, 0, 0, 0]
    assert ws.store.get("counter") == 1000


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_sigkill_at_random_instants_leaves_a_readable_store(
    ws: Workspace, fork: multiprocessing.context.BaseContext
) -> None:
    import random

    rng = random.Random(1234)
    last = 0
    for _ in range(15):
        child = workers.process(fork, workers.update_forever, str(ws.path))
        child.start()
        time.sleep(rng.uniform(0.05, 0.15))
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
        child.join()
        value = ws.store.get("counter", 0)  # raises if the file were torn
        assert value >= last
        last = value
    assert last > 0
