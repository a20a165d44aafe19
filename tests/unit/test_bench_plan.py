"""Where each bench session goes with several gateways, and what it orders (pure)."""

from __future__ import annotations

import pytest
import quickfix as fix

from services.bench.__main__ import parser
from services.bench.engine import bench_comp_ids, initiator_settings
from services.bench.plan import bench_pool, gateway_addresses, session_plans
from shared.compids import BENCH_COMP_IDS, gateway_comp_ids, gateway_of

ACORN, BIRCH = ("ACORN.LAB", "100.00"), ("BIRCH.LAB", "25.00")


def test_one_gateway_takes_the_pool_as_it_is() -> None:
    assert bench_pool(1) == BENCH_COMP_IDS
    assert bench_comp_ids(1, 3, 1) == bench_comp_ids(1, 3) == ["BENCH001", "BENCH002", "BENCH003"]


def test_two_gateways_deal_the_pool_over_their_ranges() -> None:
    pool = bench_pool(2)
    assert sorted(pool) == list(BENCH_COMP_IDS)
    assert pool[:4] == ("BENCH001", "BENCH113", "BENCH002", "BENCH114")
    assert bench_comp_ids(1, 8, 2) == list(pool[:8])
    assert [gateway_of(c, 2) for c in pool[:8]] == [1, 2] * 4
    # Three gateways of unequal ranges (75, 75, 74): every CompID once, each in its own gateway's range.
    three = bench_pool(3)
    assert sorted(three) == list(BENCH_COMP_IDS)
    assert all(c in gateway_comp_ids(gateway_of(c, 3) or 0, 3).bench for c in three[:9])
    assert [gateway_of(c, 3) for c in three[:6]] == [1, 2, 3, 1, 2, 3]
    with pytest.raises(ValueError, match="outside the pool"):
        bench_comp_ids(220, 8, 2)


def test_gateway_addresses_one_each_or_the_runners_layout() -> None:
    assert gateway_addresses([("h", 9878)], 1) == (("h", 9878),)
    assert gateway_addresses([("h", 9878)], 3) == (("h", 9878), ("h", 9879), ("h", 9880))
    assert gateway_addresses([("a", 1), ("b", 7)], 2) == (("a", 1), ("b", 7))
    with pytest.raises(ValueError, match="one per gateway"):
        gateway_addresses([("a", 1), ("b", 7)], 3)
    with pytest.raises(ValueError, match="past 65535"):
        gateway_addresses([("h", 65535)], 2)


def test_each_session_goes_to_its_gateway_and_alternates_instruments() -> None:
    addrs = (("127.0.0.1", 5000), ("127.0.0.1", 6000))
    plans = session_plans(bench_comp_ids(1, 8, 2), addrs, [ACORN, BIRCH])
    got = [(p.comp_id, p.port, p.symbol, p.price) for p in plans]
    assert got[:4] == [("BENCH001", 5000, *ACORN), ("BENCH113", 6000, *ACORN),
                       ("BENCH002", 5000, *BIRCH), ("BENCH114", 6000, *BIRCH)]
    # Every gateway carries every instrument.
    assert {(p.port, p.symbol) for p in plans} == {(5000, "ACORN.LAB"), (5000, "BIRCH.LAB"),
                                                   (6000, "ACORN.LAB"), (6000, "BIRCH.LAB")}
    one = session_plans(["BENCH001", "BENCH200"], addrs[:1], [ACORN])
    assert {(p.host, p.port, p.symbol) for p in one} == {("127.0.0.1", 5000, "ACORN.LAB")}
    with pytest.raises(ValueError, match="not a BENCH CompID"):
        session_plans(["CLIENT01"], addrs, [ACORN])


def test_initiator_settings_name_each_sessions_gateway() -> None:
    settings = initiator_settings("127.0.0.1", 5000, ["BENCH001", "BENCH113"],
                                  addresses={"BENCH113": ("127.0.0.2", 6000)})

    def where(comp: str) -> tuple[str, str]:
        d = settings.get(fix.SessionID("FIX.4.4", comp, "FIXLAB"))
        return d.getString("SocketConnectHost"), d.getString("SocketConnectPort")
    assert where("BENCH001") == ("127.0.0.1", "5000")
    assert where("BENCH113") == ("127.0.0.2", "6000")


def test_the_cli_takes_one_address_or_every_gateways() -> None:
    one = parser().parse_args(["--addr", "gw:9878", "--gateways", "2"])
    assert (one.addr, one.addrs, one.gateways) == (("gw", 9878), None, 2)
    both = parser().parse_args(["--addrs", "h1:9878, h2:9990"])
    assert both.addrs == [("h1", 9878), ("h2", 9990)]
    with pytest.raises(SystemExit):
        parser().parse_args(["--addrs", "h1:9878,h2"])
