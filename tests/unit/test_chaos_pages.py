"""The fault suite's own pieces for faults 5 and 6, with literals: the slow FIX peer's frames, the
sessions file, and what the pages' tally says about a web restart (benchmarks/chaos)."""

from __future__ import annotations

from benchmarks.chaos.faults import SLOW_COMP_IDS, sessions_file_text
from benchmarks.chaos.pages import Pages, PageStats
from benchmarks.chaos.slow import frame
from shared.fix.codec import field, framing_problems


def test_a_slow_peers_frame_adds_up() -> None:
    raw = frame([(35, "D"), (49, "CHAOSSLWDEAF"), (56, "FIXLAB"), (34, 7), (11, "x-1"), (44, "100.00")])
    assert raw.startswith(b"8=FIX.4.4\x019=")
    assert framing_problems(raw) == []
    assert field(raw, 11) == "x-1"


def test_the_slow_peers_end_with_their_sessions_and_half_the_load_keeps_its_orders() -> None:
    text = sessions_file_text(["A1", "A2", "A3", "A4"], SLOW_COMP_IDS)
    blocks = [b.splitlines() for b in text.strip().split("\n\n")]
    assert [b[1] for b in blocks] == [f"TargetCompID={c}" for c in ["A1", "A2", "A3", "A4", *SLOW_COMP_IDS]]
    assert [("CancelOnDisconnect=N" in b) for b in blocks] == [True, True, False, False, False, False]


def test_pages_count_as_resumed_only_when_each_resumed_and_traded_after() -> None:
    pages = Pages("ws://unused/ws", 2)
    pages.stats = [PageStats(orders_sent=10, fills=9, connects=2, resumed=1, orders_after_resume=4,
                             fills_after_resume=3),
                   PageStats(orders_sent=10, fills=6, connects=2, resumed=1)]
    assert not pages.resumed_and_trading()
    pages.stats[1].fills_after_resume = 1
    assert pages.resumed_and_trading()
    summary = pages.summary()
    assert "2 lab pages: 20 orders, 15 fills, 0 errors" in summary
    assert ("reconnected by themselves 2 times, 2 of 2 resumed their session, then 4 orders, 4 fills"
            in summary)


def test_pages_that_never_lost_their_socket_say_nothing_of_resuming() -> None:
    pages = Pages("ws://unused/ws", 1)
    pages.stats = [PageStats(orders_sent=5, fills=5, connects=1)]
    assert pages.summary() == "1 lab pages: 5 orders, 5 fills, 0 errors"
    assert not pages.resumed_and_trading()
