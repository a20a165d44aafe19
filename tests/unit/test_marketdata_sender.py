"""The market-data sender's messages: groups kept in their entries, one parse shared by subscribers."""

from __future__ import annotations

from services.gateway.mdfeed import GroupSender
from shared.fix.dictionary import installed_dictionary

SOH = "\x01"
ENTRIES = (f"268=2{SOH}279=0{SOH}269=2{SOH}55=ACORN.LAB{SOH}270=100.00{SOH}271=1{SOH}"
           f"279=2{SOH}269=0{SOH}55=ACORN.LAB{SOH}270=99.90{SOH}")


def body_of(text: str) -> str:
    """The fields from 35 to the trailer, in the order QuickFIX writes them."""
    start = text.index(f"{SOH}35=") + 1
    return text[start:text.index(f"{SOH}10=") + 1]


def test_an_x_keeps_each_group_entry_in_order_and_its_own_mdreqid() -> None:
    sender = GroupSender(lambda comp: None, installed_dictionary())
    first = sender.message(f"35=X{SOH}262=a{SOH}" + ENTRIES).toString()
    second = sender.message(f"35=X{SOH}262=b{SOH}" + ENTRIES).toString()
    assert body_of(first) == f"35=X{SOH}262=a{SOH}" + ENTRIES
    assert body_of(second) == f"35=X{SOH}262=b{SOH}" + ENTRIES
    assert len(sender._templates) == 1  # one parse for both
    group = f"268=1{SOH}269=1{SOH}270=100.10{SOH}271=4{SOH}346=1{SOH}"
    w = sender.message(f"35=W{SOH}262=s{SOH}55=ACORN.LAB{SOH}" + group).toString()
    # QuickFIX writes a body's own fields by tag number; a group's entries keep the dictionary's order.
    assert body_of(w) == f"35=W{SOH}55=ACORN.LAB{SOH}262=s{SOH}" + group


def test_a_session_not_held_here_is_not_sent_to() -> None:
    sender = GroupSender(lambda comp: None, installed_dictionary())
    assert sender("NOBODY", f"35=X{SOH}262=a{SOH}" + ENTRIES) is False
