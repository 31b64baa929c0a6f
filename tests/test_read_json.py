"""The one reader of accel's files: regular files only, never blocking, bounded in size,
depth and numbers; every refusal a :class:`DamagedFile` (an IntegrityError)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from accel._fs import (
    JSON_DEPTH,
    DamagedFile,
    json_depth,
    open_regular,
    parse_json,
    read_json,
    read_regular,
)
from accel.errors import IntegrityError

pytestmark = pytest.mark.timeout(20)


def test_a_plain_record_reads_as_json(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    record = {"a": [1, -2, 2.5, '[[{{\\"', None, True], "size": 2**63 - 1, "t": 1.7e9}
    path.write_text(json.dumps(record))
    assert read_json(path) == record


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "f")
    with pytest.raises(DamagedFile, match="is a FIFO, not a regular file"):
        read_json(tmp_path / "f")
    with pytest.raises(IntegrityError, match="FIFO"):
        open_regular(tmp_path / "f")


def test_folders_links_and_devices_are_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(DamagedFile, match="is a folder"):
        read_json(tmp_path / "d")
    with pytest.raises(DamagedFile, match="symbolic link"):
        read_json(tmp_path / "link.json")
    assert read_json(tmp_path / "link.json", follow=True) == {}
    with pytest.raises(DamagedFile, match="character device"):
        read_regular("/dev/zero", 10, follow=True)


def test_missing_stays_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "none.json")


def test_size_is_bounded_and_checked_against_the_record(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 100)
    assert read_regular(path, 100) == b"x" * 100
    with pytest.raises(DamagedFile, match="larger than"):
        read_regular(path, 99)
    os.close(open_regular(path, size=100))
    with pytest.raises(DamagedFile, match="has 100 bytes, its record says 99"):
        open_regular(path, size=99)


@pytest.mark.parametrize(
    "text",
    [
        "[" * (JSON_DEPTH + 1) + "]" * (JSON_DEPTH + 1),
        '{"a": ' * 100_000,
        "[" * 1_000_000,
    ],
    ids=["65-levels", "100k-objects", "1M-arrays"],
)
def test_nesting_is_refused_before_json_recurses(text: str) -> None:
    with pytest.raises(DamagedFile, match="nested more than 64 levels"):
        parse_json(text, "r.json")


def test_brackets_inside_strings_are_no_nesting() -> None:
    text = json.dumps({"tag": "[" * 1000 + "{" * 1000})
    assert parse_json(text, "r.json") == {"tag": "[" * 1000 + "{" * 1000}
    assert parse_json("[" * JSON_DEPTH + "]" * JSON_DEPTH, "r.json") is not None


@pytest.mark.parametrize(
    "number", ["9" * 400, "-" + "9" * 30, str(2**63), "1e400", "-1e999", "NaN", "Infinity"]
)
def test_numbers_no_record_holds_are_refused(number: str) -> None:
    with pytest.raises(DamagedFile, match="holds the number"):
        parse_json(f'{{"size": {number}}}', "r.json")


def test_records_of_user_values_may_hold_any_json_number() -> None:
    assert parse_json('{"v": 1' + "0" * 30 + "}", "r", strict=False) == {"v": 10**30}


def test_not_json_is_one_damaged_file_error() -> None:
    for text in (b"{", b"\xff\xfe{", b"[1] [2]"):
        with pytest.raises(DamagedFile, match="is not valid JSON"):
            parse_json(text, "r.json")


def _depth(value: object) -> int:
    """The nesting of a parsed value, each list or dict a level: what json_depth counts."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def test_json_depth_counts_what_the_parsed_value_nests() -> None:
    # Strings full of brackets, quotes and escapes (an escaped backslash before a quote),
    # one to 90 levels, in every form json writes: past the limit exactly when the value
    # is, and never below its depth (a text with few brackets is counted by its brackets).
    rnd = random.Random(7)
    pieces = ['"', "\\", "[", "]", "{", "}", "a", "\n", "é", '\\"', "\\\\", "[[[[", '""']

    def text() -> str:
        return "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 8)))

    def value(depth: int) -> object:
        if depth == 0:
            return text()
        kids = [value(depth - 1) for _ in range(2 if rnd.random() < 0.05 else 1)]
        return [*kids, text()] if rnd.random() < 0.5 else {text(): kid for kid in kids}

    for _ in range(150):
        v = value(rnd.choice([1, 5, 40, 63, 64, 65, 66, 90]))
        for dumped in (json.dumps(v), json.dumps(v, ensure_ascii=False), json.dumps(v, indent=1)):
            counted, deep = json_depth(dumped.encode()), _depth(v)
            assert (counted > JSON_DEPTH) == (deep > JSON_DEPTH), dumped[:200]
            assert counted >= min(deep, JSON_DEPTH + 1), dumped[:200]
