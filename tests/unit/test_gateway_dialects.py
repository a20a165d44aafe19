"""FIX 4.4 bodies said to FIX 4.2 and FIX 5.0 SP2 sessions (services/gateway/dialects.py), from the
acceptor's own trimmed dictionaries of each version (issue 25)."""

from __future__ import annotations

import pytest

from services.gateway.dialects import Dialect, dialects
from services.gateway.server import VersionDictionaries
from shared.fix.dictionary import load, write_exchange_dictionary
from shared.fix.versions import VERSIONS

SOH = "\x01"
NEW = "35=8|37=O1|17=E1|11=c1|150=0|39=0|55=ACORN.LAB|54=1|38=5|40=2|44=100.00|59=0|151=5|14=0|6=0|60=T|"
FILL = ("35=8|37=O1|17=E2|11=c1|150=F|39=1|55=ACORN.LAB|54=1|38=5|40=2|44=100.00|31=100.00|32=2|151=3|14=2|"
        "6=100.00|60=T|527=M9|")
STATUS = "35=8|37=O1|17=0|11=c1|150=I|39=1|55=ACORN.LAB|54=1|151=3|14=2|6=100.00|60=T|790=q1|"
REJECT = "35=8|37=NONE|17=E3|11=c2|150=8|39=8|55=ACORN.LAB|54=1|151=0|14=0|6=0|60=T|58=bad qty|103=13|"
CXL_REJECT = "35=9|37=NONE|11=c3|41=c1|39=8|434=1|102=99|60=T|58=no|"


def wire(text: str) -> str:
    return text.replace("|", SOH)


def fields(body: str) -> list[tuple[str, str]]:
    return [tuple(p.split("=", 1)) for p in body.split(SOH) if p]  # type: ignore[misc]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dialect]:
    base = tmp_path_factory.mktemp("dialects")
    fix44 = load(str(write_exchange_dictionary(base / "FIXLAB-FIX44.xml")))
    out = {}
    for name in ("4.2", "5.0SP2"):
        vd = VersionDictionaries(VERSIONS[name], base, fix44, trim=True)
        assert vd.parsed is not None
        out[name] = Dialect(vd.version, vd.parsed)
    return out


def test_fix42_execution_reports(made: dict[str, Dialect]) -> None:
    d = made["4.2"]
    new = dict(fields(d(wire(NEW))))
    assert (new["20"], new["150"]) == ("0", "0")
    fill = fields(d(wire(FILL)))
    assert ("150", "1") in fill and ("20", "0") in fill and ("58", "TrdMatchID=M9") in fill
    assert not any(tag in ("527", "880") for tag, _ in fill)
    assert dict(fields(d(wire(FILL.replace("39=1", "39=2")))))["150"] == "2"
    status = dict(fields(d(wire(STATUS))))
    assert (status["20"], status["150"], status["39"]) == ("3", "1", "1") and "790" not in status
    assert dict(fields(d(wire(REJECT))))["103"] == "0"  # 13 (incorrect quantity) came with 4.3
    assert dict(fields(d(wire(CXL_REJECT))))["102"] == "2"  # 99 (other) came with 4.3


def test_fix50sp2_adds_what_it_requires_and_leaves_reports_as_built(made: dict[str, Dialect]) -> None:
    d = made["5.0SP2"]
    assert d(wire(FILL)) == wire(FILL) and d(wire(REJECT)) == wire(REJECT)
    r = dict(fields(d(wire("35=r|11=m1|37=MC7|530=7|531=7|533=0|60=T|"))))
    assert r["1369"] == "MC7"
    w = dict(fields(d(wire("35=W|262=md|55=ACORN.LAB|268=0|"))))
    assert len(w["779"]) == 17


def test_fix44_has_no_dialect(made: dict[str, Dialect]) -> None:
    # Its bodies go out as built: no Dialect, no test per message on its sessions.
    d42 = made["4.2"]
    table = {"FIX.4.4": (VERSIONS["4.4"], d42.dictionary), "FIX.4.2": (VERSIONS["4.2"], d42.dictionary)}
    assert VERSIONS["4.4"].rewrites is False and set(dialects(table)) == {"FIX.4.2"}


def test_indicative_entries_said_by_each_version(made: dict[str, Dialect]) -> None:
    """A call's indicative price (FIX 4.4's 269=4) is FIX 5.0 SP2's Auction clearing price (Q);
    FIX 4.2 keeps 4 and has no TradingSessionSubID (625) in market data."""
    w = wire("35=W|262=r|55=ACORN.LAB|268=2|269=0|270=100.50|271=30|346=3|269=4|270=100.50|271=30|625=2|")
    x = wire("35=X|262=r|268=2|279=1|269=5|55=ACORN.LAB|270=100.50|271=30|625=4|"
             "279=0|269=A|55=ACORN.LAB|270=100.50|271=5|625=4|277=Q|")
    sp2_w, sp2_x = dict(fields(made["5.0SP2"](wire(w)))), fields(made["5.0SP2"](wire(x)))
    assert [v for t, v in fields(made["5.0SP2"](w)) if t == "269"] == ["0", "Q"] and "779" in sp2_w
    assert [v for t, v in sp2_x if t == "269"] == ["Q", "A"] and ("277", "Q") in sp2_x
    w42 = fields(made["4.2"](w))
    assert [v for t, v in w42 if t == "269"] == ["0", "4"] and "625" not in dict(w42)
    assert made["4.2"](w).startswith("35=W" + SOH)
