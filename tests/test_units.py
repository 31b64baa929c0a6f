from __future__ import annotations

import os

import pytest

from accel.errors import UsageError
from accel.units import format_duration, format_size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1024", 1024),
        ("10B", 10),
        ("1KB", 1000),
        ("1kb", 1000),
        ("512MiB", 512 * 1024**2),
        ("20GB", 20 * 1000**3),
        ("1.5GiB", 3 * 1024**3 // 2),
        ("2 TiB", 2 * 1024**4),
        (" 3k ", 3000),
        (4096, 4096),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "10QB",
        "-1GB",
        "1e3",
        "nan",
        "inf",
        "GB",
        "1..5GB",
        "1 0GB",
        "١٢GB",
        "12GB!",
        "9" * 30,
        "99999999999PB",
        True,
        -5,
        "0x10",
    ],
)
def test_parse_size_rejects(text: object) -> None:
    with pytest.raises(UsageError, match="size"):
        parse_size(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", 30),
        ("15m", 900),
        ("12h", 43200),
        ("7d", 604800),
        ("2w", 1209600),
        ("1h30m", 5400),
        ("0s", 0),
        ("1.5h", 5400),
        (" 7d ", 604800),
    ],
)
def test_parse_duration(text: str, expected: float) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "7",
        "7dd",
        "7x",
        "-1d",
        "nan",
        "inf",
        "1d1d",
        "d",
        "7 d",
        "٧d",
        "1e3s",
        "99999999w",
        "1h 30m",
    ],
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("7 days", ": write 7d"),
        ("90min", ": write 90m"),
        ("2 weeks", ": write 2w"),
        ("1 hour 30 minutes", ": write 1h30m"),
        ("1h 30m", ": write 1h30m"),
        ("7D", ": write 7d"),
        ("7", ": add a unit (7d, 7h)"),
        ("15M", ""),  # minutes or months: no guess
        ("1 day 1 day", ""),
        ("7x", ""),
    ],
)
def test_a_refused_duration_says_how_to_write_it(text: str, said: str) -> None:
    # `--older-than "7 days"` (systemd's spelling) and `--older-than 7` were told only
    # the grammar; the grammar stays strict, the line now says what to type
    with pytest.raises(UsageError) as refused:
        parse_duration(text)
    assert str(refused.value) == (
        f"invalid duration {text!r}: expected a duration like 30s, 15m, 12h, 7d, 2w or 1h30m" + said
    )


def test_a_config_duration_and_since_say_it_too() -> None:
    from accel.config.resolve import flag_value
    from accel.runs.logindex import parse_since

    with pytest.raises(UsageError, match=r"got '7 days': write 7d$"):
        flag_value("launch.hang_timeout", "7 days")
    with pytest.raises(UsageError, match=r"2026-11-29T10:00: write 10m$"):
        parse_since("10 minutes")


def test_formatting_for_people() -> None:
    assert format_size(512) == "512 B"
    assert format_size(1536) == "1.5 KiB"
    assert format_size(3 * 1024**3) == "3.0 GiB"
    assert format_duration(5) == "5.0s"
    assert format_duration(93784) == "1d 2h"
    assert format_duration(3600) == "1h"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (10.0, "10s"),
        (0, "0s"),
        (0.5, "0.5s"),
        (60, "1m"),
        (5400, "1h30m"),
        (90.5, "1m30.5s"),
        (7 * 86400 + 3600, "1w1h"),
        (300.0, "5m"),
    ],
)
def test_duration_text_is_exact_and_reads_back(seconds: float, text: str) -> None:
    from accel.units import duration_text

    assert duration_text(seconds) == text and parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (10 * 1024**2, "10MiB"),
        (0, "0B"),
        (1000, "1KB"),
        (1536, "1536B"),
        (20 * 1000**3, "20GB"),
        (3 * 1024**4, "3TiB"),
    ],
)
def test_size_text_is_exact_and_reads_back(size: int, text: str) -> None:
    from accel.units import size_text

    assert size_text(size) == text and parse_size(text) == size


def test_recorded_times_are_read_once_for_everyone() -> None:
    """run.json's times, for ``accel runs`` (durations) and ``accel clean`` (ages)."""
    from datetime import datetime, timezone

    from accel.units import parse_time, recorded_time

    utc = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    assert parse_time("2026-12-01T12:00:00+00:00") == utc
    assert parse_time("2026-12-01T12:00:00") == utc  # no zone: UTC, as accel writes them
    assert parse_time("2026-12-01T13:00:00.5+01:00") == utc.replace(microsecond=500000)
    # what Python 3.10's fromisoformat refused: a Z, a fraction of other than 3 or 6 digits
    assert parse_time("2026-12-01T12:00:00Z") == parse_time("2026-12-01T12:00:00z") == utc
    assert parse_time("2026-12-01T12:00:00.25Z") == utc.replace(microsecond=250000)
    assert parse_time("2026-12-01T12:00:00.1234567+00:00") == utc.replace(microsecond=123456)
    assert parse_time("2026-13-01T12:00:00Z") is None
    for bad in ("", "yesterday", None, 17, ["2026"]):
        assert parse_time(bad) is None
    assert recorded_time("2026-12-01T12:00:00Z") == utc.timestamp()
    assert recorded_time(1796184735.5) == 1796184735.5
    assert recorded_time(True) == recorded_time("soon") == recorded_time(None) == 0.0


def test_ago_reads_the_same_in_every_command() -> None:
    from accel.units import ago

    now = 1_000_000.0
    assert ago(now, now - 93784) == "1d 2h ago"
    assert ago(now, now - 93784, coarse=True) == "1d ago"  # accel clean's long listings
    assert ago(now, now - 59, coarse=True) == "59s ago"
    assert ago(now, now + 5) == ago(now, now + 5, coarse=True) == "in the future"
    assert ago(now, None) == ""


def test_one_translator_of_storage_errors() -> None:
    """A save's WriteFailed and every command's StorageError give the same hint."""
    import errno

    from accel.errors import StorageError, storage_error, write_failed

    for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO):
        exc = OSError(code, os.strerror(code))
        saved, shown = write_failed("/ws/state.tensors", exc), storage_error(exc, "write", "/x")
        assert isinstance(shown, StorageError)
        assert str(saved).split("; ", 1)[1] == str(shown).split("; ", 1)[1]
        assert str(saved).startswith(f"cannot write /ws/state.tensors: {os.strerror(code)}; ")
    # a serializer's error with no errno, but saying what happened
    assert "disk is full" in str(write_failed("f", RuntimeError("No space left on device")))
    assert "file-size limit" in str(write_failed("f", RuntimeError("file size limit exceeded")))
    assert "healthy" in str(write_failed("f", RuntimeError("unexpected")))


@pytest.mark.parametrize("code", [13, 1])  # EACCES, EPERM
def test_a_permission_error_says_so_once_and_how_to_fix_it(code: int) -> None:
    """`accel config set` in a workspace another user made printed "...: Permission
    denied; permission denied: fix the permissions or use another --workspace"."""
    from accel.errors import storage_error, write_failed

    exc = OSError(code, os.strerror(code), "/ws/.accelerate/locks/config.lock")
    for shown in (storage_error(exc, "take the lock"), write_failed("/ws/state.bin", exc)):
        text = str(shown)
        assert text.lower().count(os.strerror(code).lower()) == 1, text
        assert text.endswith("; fix the permissions or use another --workspace"), text


def test_a_file_this_user_may_not_read_is_not_called_damaged() -> None:
    """A run record another user made (0640) is not to be moved aside: that is the
    advice for a file that is not what accel writes, or that the disk cannot read."""
    import errno

    from accel.errors import DamagedFile, unreadable

    denied = unreadable("/ws/run.json", PermissionError(errno.EACCES, "Permission denied"))
    assert isinstance(denied, DamagedFile) and denied.why == "cannot be read (Permission denied)"
    assert str(denied) == (
        "/ws/run.json cannot be read (Permission denied); "
        "read it as its owner or its group, or fix its permissions"
    )
    broken = unreadable("/ws/run.json", OSError(errno.EIO, "Input/output error"))
    assert str(broken) == "/ws/run.json cannot be read (Input/output error); move it aside"
