"""Cutting worker output into pieces (pure): lines, partial lines, redraws, two streams."""

from __future__ import annotations

from pathlib import Path

from accel.runs.streams import (
    CR,
    NL,
    STDERR,
    STDOUT,
    Interleaver,
    Lines,
    Piece,
    RankLogReader,
    Splitter,
    log_prefix,
)


def P(data: bytes, end: bytes, start: bool = True, redraw: bool = False) -> Piece:
    return Piece(data, end, start, redraw)


def test_whole_lines_come_out_at_once() -> None:
    s = Splitter(redraw_every=1.0, idle=0.2)
    assert s.feed(b"one\ntwo\n", 0.0) == [P(b"one\ntwo", NL)]  # one piece, two lines
    assert s.deadline() is None and s.flush(100.0) == []
    assert s.feed(b"thr", 0.0) == [] and s.feed(b"ee\nfour\nfi", 0.0) == [
        P(b"three", NL),
        P(b"four", NL),
    ]
    one_by_one = Splitter(redraw_every=1.0, idle=0.2, blocks=False)
    assert one_by_one.feed(b"one\ntwo\n", 0.0) == [P(b"one", NL), P(b"two", NL)]


def test_a_block_of_lines_gets_a_prefix_on_each() -> None:
    mix = Interleaver(lambda s: b"E:")
    assert mix.render(STDERR, P(b"a\nb\n", NL)) == b"E:a\nE:b\nE:\n"


def test_a_partial_line_comes_out_when_the_stream_goes_quiet() -> None:
    s = Splitter(redraw_every=1.0, idle=0.2)
    assert s.feed(b"loading", 0.0) == []
    assert s.deadline() == 0.2 and s.flush(0.1) == []
    assert s.flush(0.2) == [P(b"loading", b"")]
    assert s.feed(b"...", 0.3) == []
    assert s.flush(0.5) == [P(b"...", b"", start=False)]
    assert s.feed(b" done\n", 0.6) == [P(b" done", NL, start=False)]


def test_a_carriage_return_ends_a_redraw_at_once() -> None:
    s = Splitter(redraw_every=1.0, idle=0.2)
    assert s.feed(b"\r 10%\r 20%", 0.0) == [P(b" 10%", CR, redraw=True)]
    assert s.flush(0.5) == []  # " 20%" waits for its turn (a redraw a second)
    assert s.deadline() == 1.0
    assert s.flush(1.0) == [P(b" 20%", b"", redraw=True)]
    assert s.feed(b"\r100%\n", 1.1) == [
        P(b"", CR, start=False, redraw=True),
        P(b"100%", NL, redraw=True),
    ]


def test_redraws_are_thinned_and_the_newest_comes_out_when_due() -> None:
    s = Splitter(redraw_every=1.0, idle=0.2)
    burst = b"".join(b"\r%d" % i for i in range(1000)) + b"\r"
    pieces = s.feed(burst, 0.0)
    assert pieces == [P(b"0", CR, redraw=True)]  # the rest are held back...
    assert s.flush(0.5) == [] and s.deadline() == 1.0
    assert s.flush(1.0) == [P(b"999", CR, redraw=True)]  # ...but the bar shows where it is
    assert s.flush(5.0) == []


def test_a_final_line_replaces_the_held_redraws() -> None:
    s = Splitter(redraw_every=1.0, idle=0.2)
    assert s.feed(b"\ra\rb\rc\rdone\n", 0.0) == [
        P(b"a", CR, redraw=True),
        P(b"done", NL, True, True),
    ]
    assert s.flush(9.0) == []


def test_crlf_ends_the_line_with_what_it_showed() -> None:
    s = Splitter(redraw_every=1.0, idle=0.2)
    assert s.feed(b"abc\r\n", 0.0) == [P(b"abc", CR), P(b"", NL, start=False, redraw=True)]
    # "y" is held back, then the line ends: the line shows "y"
    assert s.feed(b"\rx\ry\r\n", 1.0) == [P(b"x", CR, redraw=True), P(b"y", NL, True, True)]
    lines = Lines()
    assert [lines.add(p) for p in Splitter(0.0).feed(b"abc\r\n", 0.0)] == [None, b"abc"]


def test_close_ends_what_is_open() -> None:
    s = Splitter(redraw_every=1.0, idle=0.2)
    s.feed(b"half", 0.0)
    assert s.close() == [P(b"half", NL)]
    s.feed(b"half", 0.0)
    assert s.flush(1.0) == [P(b"half", b"")]
    assert s.close() == [P(b"", NL, start=False)]
    assert s.close() == []


def test_lines_are_what_a_terminal_shows() -> None:
    lines = Lines()
    pieces = Splitter(0.0, 0.0).feed(b"\r 10%\r100%\nplain\n\n", 0.0)
    finished = [line for p in pieces if (line := lines.add(p)) is not None]
    assert finished == [b"100%", b"plain\n"]  # "plain" and "" came as one block


def test_interleaving_never_mixes_lines() -> None:
    mix = Interleaver(lambda s: b"E:" if s == STDERR else b"")
    out = mix.render(STDOUT, P(b"loading", b""))
    out += mix.render(STDERR, P(b"warning", NL))
    out += mix.render(STDOUT, P(b" done", NL, start=False))
    assert out == b"loading\nE:warning\n done\n"
    bar = mix.render(STDERR, P(b" 10%", CR, redraw=True))
    bar += mix.render(STDERR, P(b" 20%", NL, redraw=True))
    assert bar == b"E: 10%\rE: 20%\n"
    # an end with nothing left to end writes nothing
    assert mix.render(STDERR, P(b"", NL, start=False)) == b""


def test_a_piped_console_turns_redraws_into_lines() -> None:
    mix = Interleaver(lambda rank: b"[rank%d] " % rank, cr=NL)
    out = mix.render(0, P(b" 10%", CR, redraw=True)) + mix.render(0, P(b" 20%", NL, redraw=True))
    assert out == b"[rank0]  10%\n[rank0]  20%\n"


def test_rank_logs_read_back_with_their_streams() -> None:
    mix = Interleaver(log_prefix)
    log = b"".join(
        mix.render(stream, piece)
        for stream, piece in [
            (STDOUT, P(b"hello", NL)),
            (STDERR, P(b"  0%", CR, redraw=True)),
            (STDERR, P(b" 50%", CR, redraw=True)),
            (STDERR, P(b"100%", NL, redraw=True)),
            (STDERR, P(b"Traceback", NL)),
            (STDOUT, P(b"partial", b"")),
        ]
    )
    assert log == b"hello\n[stderr]   0%\r[stderr]  50%\r[stderr] 100%\n[stderr] Traceback\npartial"
    reader = RankLogReader()
    # a redraw replaced later in the same read is skipped: its final state shows
    assert reader.feed(log) == [
        (STDOUT, P(b"hello", NL)),
        (STDERR, P(b"100%", NL, redraw=True)),
        (STDERR, P(b"Traceback", NL)),
        (STDOUT, P(b"partial", b"")),
    ]
    assert reader.feed(b"", final=True) == [(STDOUT, P(b"", NL, start=False))]


def test_a_half_written_mark_waits_for_the_rest() -> None:
    reader = RankLogReader()
    assert reader.feed(b"[std") == []
    assert reader.feed(b"err] oops\n") == [(STDERR, P(b"oops", NL))]
    assert reader.feed(b"[stdout is not a mark\n") == [(STDOUT, P(b"[stdout is not a mark", NL))]


def test_a_quiet_flush_holds_back_what_may_start_a_secret() -> None:
    from accel.runs.logs import LogRouter

    router = LogRouter(Path("."), Path("."), 1, None, lambda r: True, secrets=["token123"])
    assert router._secret_start(b"my tok") == 3 and router._secret_start(b"my t0") == 0
    s = Splitter(redraw_every=1.0, idle=0.2, hold=router._secret_start)
    assert s.feed(b"key: tok", 0.0) == []
    assert s.flush(0.3) == [P(b"key: ", b"")]  # "tok" waits: it may be "token123"
    assert s.deadline() is None and s.flush(9.0) == []
    assert s.feed(b"en123 ok\n", 9.1) == [P(b"token123 ok", NL, start=False)]
    scrubbed = router._scrub([P(b"token123 ok", NL, start=False)])
    assert scrubbed == [P(b"*** ok", NL, start=False)]
