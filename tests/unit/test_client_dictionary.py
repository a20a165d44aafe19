"""The dictionaries a FIX 5.0 SP2 session validates with, both ends: the terminal client's cut of the
stock FIX50SP2.xml (every message the exchange speaks kept whole, so it validates those as the stock
file does) and the acceptor's, which knows the repeating groups FIX 4.4 lists in what a client sends
(so the engine counts their entries: 373=16, conformance 14i) and none of 5.0 SP2's own."""

from __future__ import annotations

import os
from pathlib import Path

from services.gateway.server import VersionDictionaries
from shared.fix.dictionary import EXCHANGE_MESSAGES, client_dictionary_file, load, parse_dictionary
from shared.fix.versions import VERSIONS, version

SP2 = version("5.0SP2")


def test_the_clients_cut_keeps_each_message_the_exchange_speaks_as_stock_has_it(tmp_path: Path) -> None:
    cut = parse_dictionary(client_dictionary_file(SP2.app_dictionary(), tmp_path).read_bytes())
    whole = load(str(SP2.app_dictionary()))
    assert set(cut.messages) == EXCHANGE_MESSAGES & set(whole.messages)
    assert len(cut.messages) < len(whole.messages) / 5
    for msg_type in cut.messages:
        assert cut.bodies[msg_type] == whole.bodies[msg_type], msg_type
        assert cut.groups[msg_type] == whole.groups[msg_type], msg_type
        for tag in cut.bodies[msg_type]:
            assert (cut.fields[tag].type, cut.fields[tag].enums.keys()) == \
                (whole.fields[tag].type, whole.fields[tag].enums.keys()), (msg_type, tag)
    assert (cut.header_tags, cut.trailer_tags) == (whole.header_tags, whole.trailer_tags)


def test_the_cut_is_written_once_per_source_file(tmp_path: Path) -> None:
    source = tmp_path / "FIX50SP2.xml"
    source.write_bytes(SP2.app_dictionary().read_bytes())
    first = client_dictionary_file(source, tmp_path / "cache")
    os.utime(first, ns=(1, 1))  # a second call that wrote it again would move its time
    assert client_dictionary_file(source, tmp_path / "cache") == first and first.stat().st_mtime_ns == 1
    text = source.read_text()
    source.write_text(text.replace("<message name='NewOrderSingle' msgtype='D' msgcat='app'>",
                                   "<message name='NewOrderSingle' msgtype='D' msgcat='app'>"
                                   "<field name='Text' required='N' />", 1))
    changed = client_dictionary_file(source, tmp_path / "cache")
    assert changed != first
    assert 58 in parse_dictionary(changed.read_bytes()).top_level("D")


def test_only_fix_50sp2_clients_validate_with_the_cut() -> None:
    assert [v.name for v in VERSIONS.values() if v.client_cut] == ["5.0SP2"]


def test_the_50sp2_acceptor_knows_fix44s_groups_in_what_clients_send_not_its_own(tmp_path: Path) -> None:
    fix44 = load()
    made = VersionDictionaries(SP2, tmp_path, fix44, trim=True)
    acceptor = load(str(made.app))
    whole = load(str(SP2.app_dictionary()))
    for msg_type in ("D", "F", "G", "H", "V"):
        assert set(acceptor.groups[msg_type]) == set(fix44.groups[msg_type]) & set(whole.groups[msg_type]), \
            msg_type
    # NoTradingSessions (386), the group 14i miscounts, and Parties (453) with its nested PartySubIDs.
    assert {386, 453} <= set(acceptor.groups["D"]) and 802 in acceptor.groups["D"][453].groups
    assert 957 in whole.groups["D"] and 957 not in acceptor.bodies["D"]  # StrategyParameters: 5.0 SP2's

