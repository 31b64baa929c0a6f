"""The cache: kinds of artifacts, key validation, safe loading, metadata for clean."""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from accel import Workspace
from accel.errors import IntegrityError, UsageError
from accel.store.entry import key_problem
from accel.store.hashing import hash_file


def test_kinds_round_trip(ws: Workspace, tmp_path: Path) -> None:
    cache = ws.cache
    cache.put("plain", {"a": [1, 2.5, None, "s"]})
    cache.put("raw", b"\x00\x01bytes")
    tensors = {"w": torch.arange(6.0).reshape(2, 3), "meta": (1, "x"), "list": [torch.ones(2)]}
    cache.put("ns/model", tensors)
    source = tmp_path / "shard.idx"
    source.write_bytes(b"index data")
    cache.put("datasets/train/index", source)

    assert cache.get("plain") == {"a": [1, 2.5, None, "s"]}
    assert cache.get("raw") == b"\x00\x01bytes"
    loaded = cache.get("ns/model")
    assert torch.equal(loaded["w"], tensors["w"]) and loaded["meta"] == (1, "x")
    path = cache.path("datasets/train/index")
    assert path is not None and path.read_bytes() == b"index data" and path.name == "shard.idx"
    assert path.is_relative_to(ws.cache_dir)
    assert "plain" in cache and "nope" not in cache
    assert cache.get("nope", "dflt") == "dflt" and cache.path("nope") is None
    with pytest.raises(UsageError, match="not a file"):
        cache.path("plain")


def test_entry_layout_and_metadata(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_RUN_ID", "run-1")
    info = ws.cache.put("a/b", [1, 2])
    entry = ws.cache_dir / "entries" / "a" / "b.entry"
    assert info.path == entry
    meta = json.loads((entry / "meta.json").read_text())
    assert {"key", "kind", "size", "created", "last_used", "run_id"} <= set(meta)
    assert meta["key"] == "a/b" and meta["run_id"] == "run-1" and meta["kind"] == "json"
    assert meta["size"] == (entry / meta["payload"]).stat().st_size

    monkeypatch.setenv("ACCEL_RUN_ID", "run-2")
    ws.cache.get("a/b")
    after = ws.cache.info("a/b")
    assert after is not None
    assert after.last_used > meta["last_used"] and after.created == meta["created"]
    assert after.run_id == "run-2"
    assert [e.key for e in ws.cache.entries()] == ["a/b"]


def test_put_replaces_and_delete_removes(ws: Workspace) -> None:
    ws.cache.put("k", 1)
    ws.cache.put("k", b"two")
    assert ws.cache.get("k") == b"two"
    assert ws.cache.delete("k") is True
    assert ws.cache.delete("k") is False
    assert "k" not in ws.cache
    assert not (ws.cache_dir / "entries" / "k.entry").exists()


def test_torn_entries_are_invisible_debris(ws: Workspace) -> None:
    ws.cache.put("whole", 1)
    ws.cache.put("torn", 2)
    (ws.cache_dir / "entries" / "torn.entry" / "meta.json").unlink()
    assert ws.cache.get("torn") is None and "torn" not in ws.cache
    assert [e.key for e in ws.cache.entries()] == ["whole"]
    assert ws.cache.debris() == [ws.cache_dir / "entries" / "torn.entry"]


BAD_KEYS = [
    "",
    "..",
    "../escape",
    "a/../../escape",
    "/abs/path",
    "a//b",
    "a/",
    "./a",
    ".hidden",
    "a\\..\\b",
    "nul\x00byte",
    "new\nline",
    "x.entry",
    "x.entry/y",
    "a" * 600,
    "b" * 201,
    "caf\udce9",  # the bytes caf\xe9 (Latin-1), as Python holds a name that is not UTF-8
    "\udce9/train",
    None,
    42,
]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_traversal_keys_never_escape(ws: Workspace, key: Any) -> None:
    before = sorted(p for p in ws.path.parent.rglob("*"))
    for call in (
        lambda: ws.cache.put(key, 1),
        lambda: ws.cache.get(key),
        lambda: ws.cache.delete(key),
        lambda: ws.cache.path(key),
        lambda: key in ws.cache,
    ):
        with pytest.raises(UsageError, match="invalid cache key"):
            call()
    assert sorted(p for p in ws.path.parent.rglob("*")) == before


def test_good_keys_are_accepted() -> None:
    for key in ["a", "a/b/c", "model:v1", "data set/train 01", "x.entryy", "ünï"]:
        assert key_problem(key) is None, key


def test_a_symlinked_namespace_cannot_lead_outside(ws: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws.cache_dir / "entries").mkdir(parents=True, exist_ok=True)
    (ws.cache_dir / "entries" / "ns").symlink_to(outside)
    with pytest.raises(UsageError, match="outside the cache"):
        ws.cache.put("ns/key", 1)
    assert list(outside.iterdir()) == []


class _Unsafe:
    pass


@pytest.mark.parametrize("value", [_Unsafe(), {"x": _Unsafe()}, lambda: 1, {1, 2}])
def test_objects_that_cannot_be_stored_safely_are_refused(ws: Workspace, value: Any) -> None:
    with pytest.raises(UsageError, match="cannot cache"):
        ws.cache.put("k", value)
    assert "k" not in ws.cache


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def _forge(entry: Path, payload: bytes) -> None:
    """Replace an entry's payload and fix its metadata, as an attacker would."""
    meta = json.loads((entry / "meta.json").read_text())
    target = entry / meta["payload"]
    target.write_bytes(payload)
    meta["checksum"], meta["size"] = hash_file(target)
    (entry / "meta.json").write_text(json.dumps(meta))


def test_a_pickle_payload_is_never_executed(ws: Workspace, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    info = ws.cache.put("model", {"w": torch.ones(2)})
    evil = tmp_path / "evil.pt"
    torch.save({"w": _Exploit(str(marker))}, evil)  # a torch zip whose pickle runs code
    _forge(info.path, evil.read_bytes())
    with pytest.raises(IntegrityError, match="refused"):
        ws.cache.get("model")
    _forge(info.path, pickle.dumps(_Exploit(str(marker))))  # a bare pickle
    with pytest.raises(IntegrityError, match="refused"):
        ws.cache.get("model")
    assert not marker.exists()


@pytest.mark.parametrize("value", [{"w": torch.ones(64)}, b"x" * 64, {"j": "x" * 64}])
def test_a_flipped_byte_is_refused(ws: Workspace, value: Any) -> None:
    info = ws.cache.put("k", value)
    meta = json.loads((info.path / "meta.json").read_text())
    payload = info.path / meta["payload"]
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0x01
    payload.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        ws.cache.get("k")


def test_memoize(ws: Workspace) -> None:
    calls: list[Any] = []

    @ws.cache.memoize(version=1)
    def square(x: int, scale: float = 1.0) -> dict[str, Any]:
        calls.append(x)
        return {"y": torch.tensor([x * x * scale])}

    assert square(3)["y"].item() == 9
    assert square(3)["y"].item() == 9
    assert square(x=3, scale=1.0)["y"].item() == 9  # same call, spelled differently
    assert square(4)["y"].item() == 16
    assert calls == [3, 4]

    @ws.cache.memoize(version=2, name="square")
    def square_v2(x: int) -> int:
        calls.append(("v2", x))
        return x * x

    assert square_v2(3) == 9 and square_v2(3) == 9
    assert calls[-1] == ("v2", 3) and len(calls) == 3

    @ws.cache.memoize
    def none_result(t: torch.Tensor) -> None:
        calls.append("none")

    none_result(torch.ones(2))
    none_result(torch.ones(2))
    assert calls.count("none") == 1
    none_result(torch.zeros(2))
    assert calls.count("none") == 2
    with pytest.raises(UsageError, match="memoize cannot key"):
        none_result(_Unsafe())  # type: ignore[arg-type]


def test_clean_by_last_use(ws: Workspace) -> None:
    from accel.clean import clean_cache

    ws.cache.put("old", 1)
    ws.cache.put("new", 2)
    old = ws.cache.info("old")
    assert old is not None
    removed = clean_cache(ws, older_than=60, now=old.last_used + 30)
    assert removed == []
    new = ws.cache.info("new")
    assert new is not None
    removed = clean_cache(ws, older_than="1m", now=new.last_used + 60.0 + 1e-3)
    assert sorted(e.key for e in removed) == ["new", "old"]
    ws.cache.put("x", 1)
    assert [e.key for e in clean_cache(ws)] == ["x"]


# -- verification, payload paths, links ----------------------------------------------------


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_a_cached_file_is_refused(ws: Workspace, tmp_path: Path) -> None:
    source = tmp_path / "shard.idx"
    source.write_bytes(b"index " * 1000)
    ws.cache.put("idx", source)
    path = ws.cache.path("idx")
    assert path is not None and path.read_bytes() == source.read_bytes()
    _flip(path)
    with pytest.raises(IntegrityError, match="fails its checksum"):
        ws.cache.path("idx")
    with pytest.raises(IntegrityError, match="fails its checksum"):
        ws.cache.get("idx")


def test_a_verified_file_is_rehashed_only_when_it_may_have_changed(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel.store import cache

    source = tmp_path / "shard.idx"
    source.write_bytes(b"x" * 100_000)
    ws.cache.put("idx", source)
    hashed: list[Path] = []
    real_hash = cache.hash_file

    def counting(path: Path, **kwargs: Any) -> Any:
        hashed.append(path)
        return real_hash(path, **kwargs)

    monkeypatch.setattr(cache, "hash_file", counting)
    ws.cache.path("idx")  # just written: too recent to trust its timestamps
    assert len(hashed) == 1 and "verified" not in _meta(ws, "idx")
    real_time = time.time
    monkeypatch.setattr(cache.time, "time", lambda: real_time() + 10)
    ws.cache.path("idx")  # settled: hashed and stamped
    assert len(hashed) == 2 and "verified" in _meta(ws, "idx")
    path = ws.cache.path("idx")  # unchanged since: not read again
    assert len(hashed) == 2 and path is not None
    st = path.stat()
    _flip(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime put back; ctime moves
    with pytest.raises(IntegrityError, match="fails its checksum"):
        ws.cache.path("idx")
    assert len(hashed) == 3


def _meta(ws: Workspace, key: str) -> dict[str, Any]:
    return json.loads((ws.cache.entry_dir(key) / "meta.json").read_text())


@pytest.mark.parametrize("payload", ["../../outside.bin", "/etc/hostname", "v0/../../x", ".."])
def test_a_payload_can_only_be_a_file_inside_its_entry(
    ws: Workspace, tmp_path: Path, payload: str
) -> None:
    outside = ws.cache_dir / "outside.bin"
    outside.write_bytes(b"secret")
    info = ws.cache.put("k", b"secret")
    meta = _meta(ws, "k")
    meta["payload"] = payload
    (info.path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(IntegrityError, match="not a file inside the entry"):
        ws.cache.get("k")
    assert "k" not in ws.cache and ws.cache.entries() == []
    assert outside.read_bytes() == b"secret"


@pytest.mark.parametrize("value", [b"secret", {"w": torch.ones(4)}, "file"])
def test_a_payload_that_is_a_link_is_refused(ws: Workspace, tmp_path: Path, value: Any) -> None:
    source = tmp_path / "f.bin"
    source.write_bytes(b"secret")
    info = ws.cache.put("k", source if value == "file" else value)
    payload = info.path / _meta(ws, "k")["payload"]
    copy = tmp_path / "copy"
    copy.write_bytes(payload.read_bytes())
    payload.unlink()
    payload.symlink_to(copy)  # same bytes, same checksum: still not accel's file
    with pytest.raises(IntegrityError):
        ws.cache.path("k") if value == "file" else ws.cache.get("k")


def test_deletes_never_follow_a_link(ws: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    real = ws.cache.put("real", b"v").path
    (outside / "k.entry").mkdir(parents=True)
    for name in ("meta.json", ".accel-owned", "data.bin"):
        (outside / "k.entry" / name).write_bytes((real / "meta.json").read_bytes())
    entries = ws.cache_dir / "entries"
    (entries / "evil.entry").symlink_to(outside / "k.entry")
    (entries / "ns").symlink_to(outside)
    before = sorted((p.name, p.read_bytes()) for p in (outside / "k.entry").iterdir())
    assert ws.cache.delete("evil") is False and ws.cache.delete("ns/k") is False
    with pytest.raises(IntegrityError, match="symbolic link"):
        ws.cache.get("evil")
    from accel.clean import clean_cache

    clean_cache(ws)
    assert sorted((p.name, p.read_bytes()) for p in (outside / "k.entry").iterdir()) == before
    assert (entries / "evil.entry").is_symlink() and (entries / "ns").is_symlink()


def test_a_damaged_meta_is_an_integrity_error_not_a_value(ws: Workspace) -> None:
    info = ws.cache.put("k", 1)
    (info.path / "meta.json").write_text('{"format": 1, "key": "k"}')
    with pytest.raises(IntegrityError, match="not a valid cache entry record"):
        ws.cache.get("k")
    assert "k" not in ws.cache and ws.cache.info("k") is None
    assert ws.cache.delete("k") is False and not info.path.exists()  # accel's: it goes


# -- links on the way to an entry, keys of memoize, values no reader takes back ------------


def _move_out(ws: Workspace, outside: Path) -> bytes:
    """The committed entry ``tmp`` moved to ``outside/k.entry`` with the key ``ns/k``, as a
    linked namespace ``ns`` would show it; its meta.json's bytes."""
    ws.cache.put("tmp", b"kept outside the workspace")
    entry = outside / "k.entry"
    (ws.cache_dir / "entries" / "tmp.entry").rename(entry)
    meta = json.loads((entry / "meta.json").read_text())
    (entry / "meta.json").write_text(json.dumps({**meta, "key": "ns/k"}))
    return (entry / "meta.json").read_bytes()


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_a_linked_namespace_is_never_read_or_written_through(
    ws: Workspace, tmp_path: Path, where: str
) -> None:
    entries = ws.cache_dir / "entries"
    outside = tmp_path / "outside" if where == "outside" else entries / "real"
    outside.mkdir(parents=True)
    before = _move_out(ws, outside)
    (entries / "ns").symlink_to(outside)
    listing = sorted(p.relative_to(outside) for p in outside.rglob("*"))
    with pytest.raises(IntegrityError, match="symbolic link"):
        ws.cache.get("ns/k")
    with pytest.raises(IntegrityError, match="symbolic link"):
        ws.cache.path("ns/k")
    assert "ns/k" not in ws.cache and ws.cache.info("ns/k") is None
    assert ws.cache.delete("ns/k") is False
    for key in ("ns/k", "ns/new", "ns/deeper/key"):  # a put makes no folder through it
        with pytest.raises(UsageError, match="symbolic link"):
            ws.cache.put(key, b"x")
    assert (outside / "k.entry" / "meta.json").read_bytes() == before  # last use: not here
    assert sorted(p.relative_to(outside) for p in outside.rglob("*")) == listing


def _link_version(ws: Workspace, key: str, target: Path, data: bytes) -> None:
    """Put a folder holding ``data`` in place of ``key``'s version folder, and forge its
    meta.json to name it, as an attacker would."""
    entry = ws.cache.entry_dir(key)
    meta = _meta(ws, key)
    version, name = meta["payload"].split("/")
    target.mkdir()
    (target / name).write_bytes(data)
    os.rename(entry / version, target.with_name("moved"))
    (entry / version).symlink_to(target)
    meta["size"], meta["checksum"] = len(data), hash_file(target / name)[0]
    (entry / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("value", [b"secret", {"j": 1}, {"w": torch.ones(4)}, "file"])
def test_a_linked_version_folder_is_refused(ws: Workspace, tmp_path: Path, value: Any) -> None:
    source = tmp_path / "f.bin"
    source.write_bytes(b"secret")
    ws.cache.put("k", source if value == "file" else value)
    payload = ws.cache.entry_dir("k") / _meta(ws, "k")["payload"]
    _link_version(ws, "k", tmp_path / "elsewhere", payload.read_bytes())
    with pytest.raises(IntegrityError, match="symbolic link"):
        ws.cache.path("k") if value == "file" else ws.cache.get("k")
    assert (tmp_path / "elsewhere").is_dir() and (tmp_path / "moved").is_dir()


def test_memoize_keys_by_the_type_of_dict_keys(ws: Workspace) -> None:
    from accel.store.cache import args_digest

    @ws.cache.memoize(version=1)
    def key_types(table: dict[Any, Any]) -> list[str]:
        return sorted(type(k).__name__ for k in table)

    for key, text in [(1, "1"), (True, "true"), (None, "null"), (1.5, "1.5"), ((1, 2), "t")]:
        assert key_types({key: "a"}) == [type(key).__name__]
        assert key_types({text: "a"}) == ["str"]
        assert key_types({key: "a"}) == [type(key).__name__]  # a hit, of its own
    assert key_types({1: "a", "b": 2}) == ["int", "str"]  # keys json cannot even sort
    assert key_types({frozenset({1}): "a"}) == ["frozenset"]
    with pytest.raises(UsageError, match="memoize cannot key"):
        key_types({_Unsafe(): 1})
    # str keys keep the digest they always had: the results cached for them stay hits
    plain = {"table": {"a": 1, "b": [1, 2.5, None, True]}, "path": Path("x"), "s": {3, 1}}
    assert args_digest(plain) == "9af5297e0a7767352e2b3075ed2f27af"


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _loop() -> dict[str, Any]:
    loop: dict[str, Any] = {"a": [1]}
    loop["a"].append(loop)
    return loop


def test_memoize_refuses_an_argument_it_cannot_key_on_with_one_usage_error(
    ws: Workspace,
) -> None:
    @ws.cache.memoize
    def size(value: Any) -> int:
        return len(str(value)) if isinstance(value, list) else value.bit_length()

    for value, why in [(_nested(3000), "nested too deep"), (_loop(), "that contains itself")]:
        with pytest.raises(UsageError, match=f"memoize cannot key on a value {why}"):
            size(value)
    assert size(10**5000) == (10**5000).bit_length()  # hex: no digit limit
    assert size(10**5000 + 1) == (10**5000 + 1).bit_length()  # a key of its own
    assert size(_nested(64)) == len(str(_nested(64)))
    with pytest.raises(UsageError, match="nested too deep"):
        size(_nested(65))


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (_nested(3000), "nested too deep"),
        ((torch.ones(1), _nested(65)), "nested too deep"),
        (_loop(), "contains itself"),
        (10**5000, "more than 4300 digits"),
        (-(10**4300), "more than 4300 digits"),
        ({"w": torch.ones(1), "n": [10**5000]}, "more than 4300 digits"),
    ],
    ids=["deep", "deep-tensors", "itself", "huge-int", "4301-digits", "tensors"],
)
def test_a_value_no_reader_takes_back_is_refused_before_a_write(
    ws: Workspace, value: Any, why: str
) -> None:
    ws.cache.put("k", 1)
    with pytest.raises(UsageError, match=f"cannot cache .*{why}"):
        ws.cache.put("k", value)
    assert ws.cache.get("k") == 1
    with pytest.raises(UsageError, match="cannot cache"):
        ws.cache.put("new", value)
    assert "new" not in ws.cache and not os.path.lexists(ws.cache.entry_dir("new"))
    ws.cache.put("edge", [_nested(63), 10**4300 - 1])  # 64 levels, 4300 digits: fine
    assert ws.cache.get("edge") == [_nested(63), 10**4300 - 1]


def test_a_huge_int_is_refused_even_where_this_process_could_write_it(ws: Workspace) -> None:
    import sys

    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # a script that handles big numbers: others read it not
    try:
        with pytest.raises(UsageError, match="more than 4300 digits"):
            ws.cache.put("k", {"n": 10**5000})
    finally:
        sys.set_int_max_str_digits(limit)
    assert "k" not in ws.cache
