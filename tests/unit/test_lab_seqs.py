"""Following the exchange's sequence numbers from the wire, as its engine counts them."""

from __future__ import annotations

from shared.fix.seqs import ExchangeSeqs

SOH = "\x01"


def msg(**tags: str) -> bytes:
    names = {"t": 35, "seq": 34, "possdup": 43, "reset": 141, "new": 36, "gapfill": 123}
    return "".join(f"{names[k]}={v}{SOH}" for k, v in tags.items()).encode()


def test_logon_with_reset_starts_both_at_two() -> None:
    s = ExchangeSeqs()
    s.client_delivered(msg(t="A", seq="1", reset="Y"))
    s.exchange_sent(msg(t="A", seq="1", reset="Y"))
    assert (s.next_sender, s.next_target) == (2, 2)


def test_gap_then_resend_with_possdup_catches_up_past_queued_messages() -> None:
    s = ExchangeSeqs()
    s.client_delivered(msg(t="A", seq="1", reset="Y"))
    # 2 was withheld by the tap; 3 arrives: the engine queues it and asks for 2.
    s.client_delivered(msg(t="D", seq="3"))
    assert s.next_target == 2
    s.client_delivered(msg(t="D", seq="2", possdup="Y"))
    assert s.next_target == 4


def test_gap_fill_moves_the_expected_number() -> None:
    s = ExchangeSeqs()
    s.client_delivered(msg(t="A", seq="1", reset="Y"))
    s.client_delivered(msg(t="0", seq="4"))
    s.client_delivered(msg(t="4", seq="2", gapfill="Y", new="4"))
    assert s.next_target == 5


def test_exchange_resends_do_not_move_its_next_number() -> None:
    s = ExchangeSeqs()
    s.exchange_sent(msg(t="A", seq="1", reset="Y"))
    s.exchange_sent(msg(t="8", seq="2"))
    s.exchange_sent(msg(t="8", seq="2", possdup="Y"))
    s.exchange_sent(msg(t="4", seq="1", gapfill="Y", new="2", possdup="Y"))
    assert s.next_sender == 3


def test_duplicates_and_garbage_change_nothing() -> None:
    s = ExchangeSeqs()
    s.client_delivered(msg(t="A", seq="1", reset="Y"))
    s.client_delivered(msg(t="0", seq="1", possdup="Y"))
    s.client_delivered(b"not fix at all")
    s.client_delivered(msg(t="0", seq="x"))
    assert s.next_target == 2
