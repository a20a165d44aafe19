"""The FIX versions the exchange speaks, and everything that differs between them, in one table.

The exchange's own language is FIX 4.4: the gateway translates to and from it, and a session of
another version sees the same messages rewritten at its edge (``services/gateway/dialects.py``
applies this table; nothing else in the gateway knows a version). Each version validates with the
dictionary the quickfix package installs for it (``installed``: ``<data>/share/quickfix/``), trimmed for the
acceptor as FIX 4.4's is (``shared.fix.dictionary.acceptor_dictionary``).

What differs, and where it is written here:

- FIX 4.2 (``FIX.4.2``, FIX42.xml): ExecutionReports carry ExecTransType (20): 0 New, 3 Status on an
  order status report; ExecType has no Trade (F) and no Order status (I): a fill is 1 (Partial
  fill) or 2 (Fill) as its OrdStatus, a status report says the order's state (150 = its 39). It has
  neither SecondaryExecID (527) nor TrdMatchID (880): the trade's match id travels in Text (58) as
  ``TrdMatchID=<id>``. Fields FIX 4.2 does not list in a message (OrdStatusReqID 790 among them)
  are left out, and enum values it does not define take their nearest meaning (``ENUM_FALLBACK``).
  FIX 4.2 has no OrderMassCancelRequest (q) nor SecurityListRequest (x) (both came with 4.3): a 4.2
  session that sends one gets the engine's session Reject "Invalid MsgType" (373=11).
  NewOrderSingle and OrderCancelReplaceRequest need HandlInst (21) there: the client sends it, the
  exchange ignores it, as it ignores it in 4.4. It has no Username (553) nor Password (554): a Logon
  carries its password in RawData (96), with RawDataLength (95) (``password_tag``; docs/security.md).
- FIX 5.0 SP2 over FIXT.1.1 (``FIXT.1.1``, FIXT11.xml for the session level, FIX50SP2.xml for the
  application, DefaultApplVerID 9): TrdMatchID (880) is a standard field of ExecutionReport, so
  every fill carries it besides SecondaryExecID (527). It requires two fields FIX 4.4 does not:
  LastUpdateTime (779) in a MarketDataSnapshotFullRefresh (W), the time it is sent, and
  MassActionReportID (1369) in an OrderMassCancelReport (r), its OrderID (37).
  The messages a client sends keep, in the acceptor's dictionary, what 5.0 SP2 requires in them and
  FIX 4.4's shape of them: the fields FIX 4.4 lists there and its repeating groups, each with the
  fields FIX 4.4 lists in it, so the engine counts a group's entries (373=16, Incorrect NumInGroup
  count). A client that sends a field or group only 5.0 SP2 has there gets a session Reject naming
  it. The whole of 5.0 SP2's messages, with their Instrument and Parties trees, costs ~10 times
  FIX 4.4's per session, and QuickFIX copies the dictionary into every session (the gateway's
  200 MiB with every session configured).
  A triggered stop's ExecutionReport says ExecType L (Triggered or Activated by System), which
  FIX50SP2.xml defines and FIX44.xml and FIX42.xml do not: there it is D (Restated), with 39=0 and
  Text (58) saying it was triggered.
- Indicative market data in a call (services/gateway/marketdata.py): FIX 4.4 sends the indicative
  price as MDEntryType 4 (Opening price) or 5 (Closing price) and the imbalance as A. FIX 4.2 has 4
  and 5 but no A (its dialect leaves A entries out, whatever the V asked for), nor
  TradingSessionSubID (625) in market data. FIX 5.0 SP2 names the price of an auction Q (Auction
  clearing price): its sessions get Q where FIX 4.4's get 4 or 5 (``md_entry_types``), with 625
  telling the auction.
- TimeInForce At the Close (59=7) came with FIX 4.3: a FIX 4.2 session that sends it gets the
  engine's session Reject (373=5, value incorrect); At the Opening (59=2) is in all three.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

FIX42 = "FIX.4.2"
FIX44 = "FIX.4.4"
FIXT11 = "FIXT.1.1"
APPL_VER_ID_50SP2 = "9"  # ApplVerID / DefaultApplVerID (1137) of FIX.5.0SP2
APPL_VER_ID_NAME_50SP2 = "FIX.5.0SP2"  # the same, as QuickFIX's settings spell it


@dataclass(frozen=True, slots=True)
class FixVersion:
    """One version the exchange speaks: its name for people and its wire and dictionary facts."""

    name: str  # "4.2", "4.4", "5.0SP2": the bench's --fix-version, the page's choice
    begin_string: str  # BeginString (8) of its sessions
    app_file: str  # the installed dictionary of its application messages
    transport_file: str | None = None  # FIXT only: the session level's own dictionary
    default_appl_ver_id: str | None = None  # FIXT only: DefaultApplVerID (1137) on the Logon
    # ExecutionReports: ExecTransType (20) on each, and no ExecType F or I (FIX 4.2).
    exec_trans_type: bool = False
    # Where a fill's match id goes: tags of SecondaryExecID/TrdMatchID it keeps, or Text (58).
    match_id_in_text: bool = False
    trd_match_id: bool = False  # every fill carries TrdMatchID (880): a standard field here
    # An enum value this version's dictionary does not define, per tag: the value sent instead.
    enum_fallback: Mapping[int, str] = field(default_factory=dict)
    # The messages a client sends keep only the tags FIX 4.4 lists in them (see the module's doc).
    received_as_fix44: bool = False
    # Fields this version requires where FIX 4.4 has none, per MsgType: tag -> where its value comes
    # from: another tag of the message ("tag:37"), or the time of sending ("now").
    required_added: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    # ExecType (150) of a stop that became a market or limit order: the exchange's FIX 4.4 body says
    # Restated (D), stock FIX44.xml having no L (Triggered or Activated by System); "" keeps D.
    triggered_exec_type: str = ""
    # MDEntryType (269) values of FIX 4.4's market data said otherwise in this version: 4.4 -> this one.
    md_entry_types: Mapping[str, str] = field(default_factory=dict)
    # The terminal client validates with the stock application dictionary cut to the messages the
    # exchange speaks, each kept whole (shared.fix.dictionary.client_dictionary_file): QuickFIX took
    # most of the client's start-up loading the whole FIX50SP2.xml (1.5 s here, 5 s on a busy machine).
    client_cut: bool = False
    # Where a Logon carries its password: Password (554), or RawData (96, after RawDataLength 95).
    password_tag: int = 554

    @property
    def rewrites(self) -> bool:
        """Whether FIX 4.4's bodies must be rewritten for this version (services/gateway/dialects.py)."""
        return (self.exec_trans_type or self.match_id_in_text or bool(self.enum_fallback)
                or bool(self.required_added) or bool(self.triggered_exec_type) or bool(self.md_entry_types))

    @property
    def fixt(self) -> bool:
        return self.transport_file is not None

    @property
    def wire_name(self) -> str:
        """How a person configuring a client names it: its BeginString (FIXT: and its application)."""
        if self.fixt:
            return f"{self.begin_string} with DefaultApplVerID {self.default_appl_ver_id} (FIX {self.name})"
        return self.begin_string

    @property
    def password_field(self) -> str:
        """Where a Logon carries its password, for people: ``Password (554)``, ``RawData (96), ...``."""
        return {554: "Password (554)", 96: "RawData (96), with RawDataLength (95)"}[self.password_tag]

    def app_dictionary(self) -> Path:
        """The installed dictionary of this version's application messages."""
        return installed(self.app_file)

    def transport_dictionary(self) -> Path:
        """The installed dictionary of this version's session level (the application's, but FIXT)."""
        return installed(self.transport_file or self.app_file)

    def dictionary_settings(self, app: Path | str | None = None,
                            transport: Path | str | None = None) -> dict[str, str]:
        """QuickFIX's settings naming what validates a session of this version: DataDictionary, or
        for FIXT.1.1 TransportDataDictionary, AppDataDictionary and DefaultApplVerID. ``app``,
        ``transport``: files to use in place of the installed ones (a cut or rewritten copy)."""
        app_path = str(app or self.app_dictionary())
        if self.fixt:
            return {"TransportDataDictionary": str(transport or self.transport_dictionary()),
                    "AppDataDictionary": app_path, "DefaultApplVerID": APPL_VER_ID_NAME_50SP2}
        return {"DataDictionary": app_path}


def settings_lines(settings: Mapping[str, str]) -> str:
    """``key=value`` lines of a QuickFIX settings section (no newline after the last)."""
    return "\n".join(f"{key}={value}" for key, value in settings.items())


VERSIONS: dict[str, FixVersion] = {
    "4.2": FixVersion(
        "4.2", FIX42, "FIX42.xml", exec_trans_type=True, match_id_in_text=True,
        # OrdRejReason 0-8 (13 Incorrect quantity, 99 Other... came with 4.3): 0 Broker option.
        # CxlRejReason 0-3 (99 Other came with 4.3): 2 Broker option.
        # SecurityTradingStatus 21 (Pre-open, a call) came with 4.3: 5 (Price indication).
        enum_fallback={103: "0", 102: "2", 326: "5"}, password_tag=96),
    "4.4": FixVersion("4.4", FIX44, "FIX44.xml"),
    "5.0SP2": FixVersion("5.0SP2", FIXT11, "FIX50SP2.xml", "FIXT11.xml", APPL_VER_ID_50SP2,
                         trd_match_id=True, received_as_fix44=True,
                         # MarketDataSnapshotFullRefresh requires LastUpdateTime (779); an
                         # OrderMassCancelReport, MassActionReportID (1369): its OrderID (37).
                         required_added={"W": {779: "now"}, "r": {1369: "tag:37"}},
                         triggered_exec_type="L", client_cut=True,
                         # The indicative price of a call: Auction clearing price (FIX50SP2.xml).
                         md_entry_types={"4": "Q", "5": "Q"}),
}
BY_BEGIN_STRING: dict[str, FixVersion] = {v.begin_string: v for v in VERSIONS.values()}
DEFAULT = VERSIONS["4.4"]


def installed(file_name: str) -> Path:
    """A dictionary the quickfix package installs (``FIX42.xml``, ``FIXT11.xml``...): under the
    scheme's data directory, which is sys.prefix in a venv or a python image but /usr/local for a root
    pip install on Debian's own python3 (sys.prefix /usr), as in the image built on a plain Debian
    base (tools/compose.py)."""
    found = [Path(base) / "share" / "quickfix" / file_name
             for base in (sysconfig.get_paths()["data"], sys.prefix)]
    return next((p for p in found if p.exists()), found[0])


def version(name: str) -> FixVersion:
    """The version named ``name`` ("4.2", "4.4", "5.0SP2"; also "FIX.4.2", "FIXT.1.1", "50SP2")."""
    key = name.strip()
    if key in VERSIONS:
        return VERSIONS[key]
    if key in BY_BEGIN_STRING:
        return BY_BEGIN_STRING[key]
    aliases = {"42": "4.2", "44": "4.4", "50SP2": "5.0SP2", "5.0": "5.0SP2", "FIX.5.0SP2": "5.0SP2"}
    if key.upper().replace("FIX", "").strip(".") in aliases:
        return VERSIONS[aliases[key.upper().replace("FIX", "").strip(".")]]
    raise ValueError(f"FIX version {name!r}: one of {', '.join(VERSIONS)}")
