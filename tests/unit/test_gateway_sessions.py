"""The acceptor's session list, the user's settings file, the gateway's config and its hand-off queue."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.gateway.config import gateway_settings
from services.gateway.sessions import (
    cancel_on_disconnect_sessions,
    load_sessions,
    parse_sessions_text,
    pool_sessions,
    settings_text,
    trd_match_sessions,
)
from shared.config import ConfigError
from shared.schema import NewOrder

ENV = {"REDIS_URL": "redis://127.0.0.1:1/0"}


def test_pools_cover_every_compid_with_their_reset_policy() -> None:
    specs = {s.target: s for s in pool_sessions()}
    # 344, as before issue 25: 16 of the 64 FIX 4.4 lab sessions became 8 FIX 4.2 and 8 FIXT.1.1 ones.
    assert len(specs) == 16 + 224 + 8 + 48 + 4 * 8 + 2 * 8
    assert specs["CLIENT01"].options["ResetOnLogon"] == "N"
    for comp in ("BENCH224", "BOT08", "LAB048", "BENCH42-008", "BENCH50-008", "LAB42-08", "LAB50-08"):
        assert specs[comp].options["ResetOnLogon"] == "Y" and specs[comp].sender == "FIXLAB"
    # FIX 4.2 and FIXT.1.1 / 5.0 SP2 beside FIX 4.4 (issue 25): clients keep their sequence numbers.
    assert {specs[c].begin for c in ("CLIENT42-01", "BENCH42-001", "LAB42-01")} == {"FIX.4.2"}
    assert {specs[c].begin for c in ("CLIENT50-08", "BENCH50-001", "LAB50-08")} == {"FIXT.1.1"}
    assert specs["CLIENT42-01"].options["ResetOnLogon"] == "N"
    assert specs["CLIENT50-01"].trd_match_id and not specs["CLIENT42-01"].trd_match_id


def test_user_file_adds_sessions_with_defaults() -> None:
    specs = parse_sessions_text("# mine\n[DEFAULT]\nResetOnLogon=Y\n[SESSION]\nTargetCompID=ACME\n"
                                "[SESSION]\nSenderCompID=ISLD\nTargetCompID=TW\nResetOnLogon=N\n")
    assert [(s.sender, s.target, s.options["ResetOnLogon"]) for s in specs] == [
        ("FIXLAB", "ACME", "Y"), ("ISLD", "TW", "N")]


def test_the_exchanges_own_session_keys_are_read_and_never_given_to_quickfix(tmp_path: Path) -> None:
    specs = parse_sessions_text("[DEFAULT]\nCancelOnDisconnect=N\n[SESSION]\nTargetCompID=ACME\n"
                                "SendTrdMatchID=Y\n[SESSION]\nTargetCompID=ACME2\nCancelOnDisconnect=Y\n")
    assert [(s.target, s.trd_match_id, s.cancel_on_disconnect) for s in specs] == [
        ("ACME", True, False), ("ACME2", False, True)]
    text = settings_text(specs, port=1, host="", data_dictionary=tmp_path / "d.xml")
    assert "SendTrdMatchID" not in text and "CancelOnDisconnect" not in text
    # Out of the box: the bots and the lab ask for 880 (FIX 4.2 has no such field: its lab sessions get
    # the match id in Text); every pool session cancels on disconnect.
    pools = pool_sessions()
    assert trd_match_sessions(pools) == {s.target for s in pools if s.begin == "FIXT.1.1" or (
        s.target[:3] in ("BOT", "LAB") and s.begin == "FIX.4.4")}
    assert cancel_on_disconnect_sessions(pools) == {s.target for s in pools}


@pytest.mark.parametrize(("text", "problem"), [
    ("[SESSION]\nTargetCompID=A\nSendTrdMatchID=maybe\n", "must be Y or N"),
    ("[SESSION]\nSenderCompID=X\n", "TargetCompID"),
    ("[SESSION]\nTargetCompID=A\nBeginString=FIX.4.3\n", "speaks FIX.4.2, FIX.4.4, FIXT.1.1"),
    ("[SESSION]\nTargetCompID=A\nBeginString=FIXT.1.1\nDefaultApplVerID=7\n", "FIX.5.0SP2, ApplVerID 9"),
    ("[SESSION]\nTargetCompID=A\nDefaultApplVerID=9\n", "FIXT.1.1 sessions only"),
    ("TargetCompID=A\n", r"before any \[SESSION\]"),
    ("[SESSIONS]\n", "unknown section"),
    ("[SESSION]\nTargetCompID\n", "not Key=Value"),
    ("[SESSION]\nTargetCompID=A\nSocketAcceptPort=1\n", "whole acceptor"),
])
def test_bad_user_files_fail_with_the_line(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_sessions_text(text, "mine.cfg")


def test_a_compid_configured_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.cfg"
    path.write_text("[SESSION]\nTargetCompID=CLIENT01\n")
    with pytest.raises(ConfigError, match="CLIENT01 is configured twice"):
        load_sessions(path)


def test_settings_text_is_a_quickfix_acceptor_file(tmp_path: Path) -> None:
    import quickfix as fix

    dd = tmp_path / "FIX44.xml"
    text = settings_text(pool_sessions()[:2], port=4242, host="0.0.0.0", data_dictionary=dd)
    path = tmp_path / "a.cfg"
    path.write_text(text)
    settings = fix.SessionSettings(str(path))
    assert settings.size() == 2
    assert "UseDataDictionary=Y" in text and "SocketAcceptPort=4242" in text


def test_sessions_of_other_versions_get_their_own_dictionaries(tmp_path: Path) -> None:
    import quickfix as fix

    specs = parse_sessions_text("[SESSION]\nTargetCompID=A42\nBeginString=FIX.4.2\n"
                                "[SESSION]\nTargetCompID=A50\nBeginString=FIXT.1.1\nDefaultApplVerID=9\n")
    assert not specs[0].trd_match_id and specs[1].trd_match_id  # 880 is standard in 5.0 SP2
    with pytest.raises(ConfigError, match=r"no dictionary for FIX\.4\.2"):
        settings_text(specs, port=1, host="", data_dictionary=tmp_path / "FIX44.xml")
    text = settings_text(specs, port=4242, host="", data_dictionary=tmp_path / "FIX44.xml", version_settings={
        "FIX.4.2": {"DataDictionary": "/d/42.xml"},
        "FIXT.1.1": {"TransportDataDictionary": "/d/t.xml", "AppDataDictionary": "/d/50.xml",
                     "DefaultApplVerID": "FIX.5.0SP2"}})
    path = tmp_path / "a.cfg"
    path.write_text(text)
    settings = fix.SessionSettings(str(path))
    fixt = settings.get(fix.SessionID("FIXT.1.1", "FIXLAB", "A50"))
    assert fixt.getString("AppDataDictionary") == "/d/50.xml"
    assert fixt.getString("DefaultApplVerID") == "FIX.5.0SP2"
    assert settings.get(fix.SessionID("FIX.4.2", "FIXLAB", "A42")).getString("DataDictionary") == "/d/42.xml"


def test_gateway_settings_defaults_and_errors(tmp_path: Path) -> None:
    s = gateway_settings(ENV)
    assert (s.fix_port, s.gateway_id, s.labs, s.store) == (9878, "gw1", True, "memory")
    assert s.data_dictionary.name == "FIX44.xml" and s.data_dictionary.is_file()
    with pytest.raises(ConfigError, match="FIXLAB_FIX_PORT"):
        gateway_settings({**ENV, "FIXLAB_FIX_PORT": "http"})
    with pytest.raises(ConfigError, match="FIXLAB_FIX_SESSIONS_FILE"):
        gateway_settings({**ENV, "FIXLAB_FIX_SESSIONS_FILE": str(tmp_path / "missing.cfg")})
    with pytest.raises(ConfigError, match="FIXLAB_FIX_STORE"):
        gateway_settings({**ENV, "FIXLAB_FIX_STORE": "disk"})
    with pytest.raises(ConfigError, match="FIXLAB_GATEWAY_ID"):
        gateway_settings({**ENV, "FIXLAB_GATEWAY_ID": "a b"})


def test_publisher_translates_groups_by_shard_in_wire_form_and_fans_session_ended_out() -> None:
    from decimal import Decimal

    from services.gateway.inbound import Inbound
    from services.gateway.intake import Publisher
    from services.gateway.resp import RespConnection
    from shared import streams
    from shared.config import Instrument
    from shared.schema import Refused, SessionEnded, encode_batch, encode_wire_batch
    from shared.schema import as_wire as to_wire

    insts = [Instrument("ACORN.LAB", 10_000, Decimal("0.01"), "a"),
             Instrument("BIRCH.LAB", 2_500, Decimal("0.01"), "b")]
    publisher = Publisher(RespConnection("redis://127.0.0.1:1/0"), Inbound(insts, "gw"), insts, 1000, "done")
    nos = "35=D\x0149=S\x0134=3\x0111={}\x0155={}\x0154=1\x0138=1\x0140=2\x0144={}\x01"
    ended = SessionEnded("S", "gw", 9)
    grouped, count = publisher.group([(nos.format("a1", "ACORN.LAB", "100.00"), 5),
                                      (nos.format("bad", "ACORN.LAB", "100.001"), 6),  # refused
                                      (nos.format("b1", "BIRCH.LAB", "25.00"), 7), to_wire(ended)])
    assert count == 3 and publisher.refused == 1
    a, b = streams.orders_stream("a"), streams.orders_stream("b")
    events = streams.events_stream("gw")
    assert set(grouped) == {a, b, events}
    assert [w[2] for w in grouped[a][:1]] == ["a1"] and grouped[a][1] == to_wire(ended)
    assert [w[2] for w in grouped[b][:1]] == ["b1"] and grouped[b][1] == to_wire(ended)
    # The refusal is answered where it was decided: on this gateway's events stream, FIX body and all.
    [refused] = grouped[events]
    assert refused[0] == Refused.CODE and refused[1] == "S" and refused[3] == 6
    assert "\x0111=bad\x01" in refused[2] and "\x0139=8\x01" in refused[2]
    # The wire form is byte for byte what the schema's own encoder writes.
    order = NewOrder("S", "a1", "ACORN.LAB", 1, 10_000, 1, 0, "gw", 3, 5)
    assert encode_wire_batch([to_wire(order), to_wire(ended)]) == encode_batch([order, ended])
