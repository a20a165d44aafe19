"""The gateway's side of IOC, FOK and self-trade prevention: sessions file, translation, reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.gateway.inbound import Inbound, Refusal
from services.gateway.outbound import Outbound
from services.gateway.sessions import parse_sessions_text, pool_sessions, settings_text, stp_modes
from shared.config import ConfigError
from shared.schema import (
    FOK,
    IOC,
    STP_CANCEL_AGGRESSOR,
    STP_CANCEL_BOTH,
    STP_CANCEL_RESTING,
    STP_OFF,
    Accepted,
    Cancelled,
    NewOrder,
    ReplaceOrder,
)
from tests.unit.test_gateway_translate import ACORN, BIRCH, NOS, RPL, TS, body, fields


def test_self_trade_prevention_is_read_per_session_and_never_given_to_quickfix(tmp_path: Path) -> None:
    specs = parse_sessions_text("[DEFAULT]\nSelfTradePrevention=CancelResting\n"
                                "[SESSION]\nTargetCompID=A\n"
                                "[SESSION]\nTargetCompID=B\nSelfTradePrevention=cancelaggressor\n"
                                "[SESSION]\nTargetCompID=C\nSelfTradePrevention=CancelBoth\n"
                                "[SESSION]\nTargetCompID=D\nSelfTradePrevention=N\n")
    assert [(s.target, s.stp) for s in specs] == [("A", STP_CANCEL_RESTING), ("B", STP_CANCEL_AGGRESSOR),
                                                  ("C", STP_CANCEL_BOTH), ("D", STP_OFF)]
    assert stp_modes(specs) == {"A": STP_CANCEL_RESTING, "B": STP_CANCEL_AGGRESSOR, "C": STP_CANCEL_BOTH}
    assert "SelfTradePrevention" not in settings_text(specs, port=1, host="", data_dictionary=tmp_path / "d")
    assert stp_modes(pool_sessions()) == {}  # off out of the box


def test_an_unknown_prevention_mode_fails_with_the_line() -> None:
    with pytest.raises(ConfigError, match=r"mine.cfg \[SESSION\] at line 1: SelfTradePrevention='Y' must be "
                                          "one of N, CancelResting, CancelAggressor, CancelBoth"):
        parse_sessions_text("[SESSION]\nTargetCompID=A\nSelfTradePrevention=Y\n", "mine.cfg")


@pytest.mark.parametrize(("raw", "tif"), [(b"59=3|", IOC), (b"59=4|", FOK)])
def test_ioc_and_fok_translate_and_carry_the_sessions_prevention(raw: bytes, tif: int) -> None:
    inbound = Inbound([ACORN, BIRCH], "gw1", "x", {"CLIENT01": STP_CANCEL_BOTH})
    cmd = inbound.command("D", fields(NOS.replace(b"59=1|", raw)), TS)
    assert cmd == NewOrder("CLIENT01", "o1", "ACORN.LAB", 1, 10_025, 10, tif, "gw1", 7, TS, STP_CANCEL_BOTH)
    other = inbound.command("D", fields(NOS.replace(b"49=CLIENT01|", b"49=CLIENT02|")), TS)
    assert isinstance(other, NewOrder) and other.stp == STP_OFF


@pytest.mark.parametrize("raw", [b"59=3|", b"59=4|", b"59=6|", b"59=x|"])
def test_a_replace_cannot_change_time_in_force_to_ioc_fok_or_an_unknown_one(raw: bytes) -> None:
    inbound = Inbound([ACORN, BIRCH], "gw1", "x")
    out = inbound.command("G", fields(RPL.replace(b"40=2|", b"40=2|" + raw)), TS)
    assert isinstance(out, Refusal)
    cxl = body(out.body)
    assert (cxl["35"], cxl["434"], cxl["102"]) == ("9", "2", "99")
    assert "is not accepted on a replace" in cxl["58"]
    same = inbound.command("G", fields(RPL.replace(b"40=2|", b"40=2|59=0|")), TS)
    assert isinstance(same, ReplaceOrder)


def test_ioc_reports_new_with_its_tif_then_cancelled_with_the_reason() -> None:
    report = Outbound([ACORN]).report
    new = body(report(Accepted("C", "o1", "7", "ACORN.LAB", 1, 10_000, 8, IOC, "E1", TS)))
    assert (new["150"], new["39"], new["59"]) == ("0", "0", "3")
    cxl = body(report(Cancelled("C", "o1", "o1", "7", "ACORN.LAB", 1, 10_000, 8, 5, 50_000,
                                "IOC: remainder cancelled", "E4", TS)))
    assert (cxl["150"], cxl["39"], cxl["14"], cxl["151"], cxl["6"]) == ("4", "4", "5", "0", "100.00")
    assert (cxl["11"], cxl["41"], cxl["58"]) == ("o1", "o1", "IOC: remainder cancelled")
