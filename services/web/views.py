"""Bus messages turned into the JSON the page reads (see docs/websocket.md). Pure functions."""

from __future__ import annotations

from collections import deque
from typing import Any

from shared.config import CommonSettings
from shared.fix.dictionary import Dictionary
from shared.fix.orders import ORD_STATUS
from shared.fix.wire import Node, ParsedMessage, WireGroup, parse, readable
from shared.schedule import Schedule
from shared.schema import (
    CALL_PHASES,
    PHASE_CLOSED,
    PHASE_CONTINUOUS,
    PHASE_HALTED,
    PHASE_NAMES,
    PHASE_PRE_CLOSE,
    PHASE_PRE_OPEN,
    Depth,
    Indicative,
    LabNotice,
    LabState,
    PhaseChanged,
    Trade,
    WireRecord,
)

JSON = dict[str, Any]
SIDE_NAMES = {1: "buy", 2: "sell"}
# What the page calls each phase (shared.schema PHASE_*).
PHASE_LABELS = {PHASE_CLOSED: "Closed", PHASE_PRE_OPEN: "Pre-open call", PHASE_CONTINUOUS: "Continuous",
                PHASE_PRE_CLOSE: "Pre-close call", PHASE_HALTED: "Halted"}
MarketMessage = Depth | Trade | PhaseChanged | Indicative


def wire_view(rec: WireRecord, d: Dictionary) -> tuple[JSON, ParsedMessage]:
    p = parse(rec.raw, d)
    view = {
        "type": "wire", "n": rec.n, "source": rec.source, "withheld": rec.withheld, "ts": rec.ts,
        "msg_type": p.msg_type, "msg_name": p.msg_name, "category": p.category, "seq": p.seq,
        "fields": [[f.tag, f.name, f.value, f.meaning, f.section] for f in p.fields],
        "tree": tree_view(p.tree), "problems": p.problems, "raw": readable(rec.raw),
    }
    return view, p


def tree_view(nodes: list[Node]) -> list[Any]:
    """Fields as ``[tag, name, value, meaning, section]``; a repeating group as
    ``{"group": <its count field>, "entries": [[node, ...], ...]}``."""
    out: list[Any] = []
    for n in nodes:
        if isinstance(n, WireGroup):
            c = n.count
            out.append({"group": [c.tag, c.name, c.value, c.meaning, c.section],
                        "entries": [tree_view(e) for e in n.entries]})
        else:
            out.append([n.tag, n.name, n.value, n.meaning, n.section])
    return out


def execution_view(p: ParsedMessage, source: str) -> JSON | None:
    """A fill or a refusal worth its own line on the page, from an exchange ExecutionReport."""
    if source != "exchange" or p.msg_type not in ("8", "9"):
        return None
    if p.msg_type == "9":
        return {"type": "notice", "level": "error",
                "text": f"Cancel/replace of {p.get(41) or '?'} refused: {p.get(58) or 'no reason given'}"}
    exec_type = p.get(150)
    # FIX 4.2: a fill is ExecType 1 or 2 with ExecTransType 0; with 3 it is a status answer.
    trans = p.get(20)
    if exec_type == "F" or (exec_type in ("1", "2") and trans == "0"):
        side = {"1": "buy", "2": "sell"}.get(p.get(54) or "", "?")
        return {"type": "fill", "clordid": p.get(11) or "", "symbol": p.get(55) or "", "side": side,
                "last_px": p.get(31) or "", "last_qty": p.get(32) or "", "cum_qty": p.get(14) or "",
                "leaves_qty": p.get(151) or "", "exec_id": p.get(17) or "", "seq": p.seq}
    if exec_type == "8" and trans != "3":
        reason = p.get(58) or "no reason given"
        return {"type": "notice", "level": "error",
                "text": f"Order {p.get(11) or '?'} rejected by the exchange: {reason}"}
    return None


def state_view(s: LabState, now_ns: int, max_open: int) -> JSON:
    return {
        "type": "state", "lab_id": s.lab_id, "comp_id": s.comp_id, "gateway_id": s.gateway_id,
        "status": s.status,
        "next_sender_seq": s.next_sender_seq, "next_target_seq": s.next_target_seq,
        "exchange_next_sender_seq": s.exchange_next_sender_seq,
        "exchange_next_target_seq": s.exchange_next_target_seq,
        "heartbeat_s": s.heartbeat_s,
        "expires_in_s": max(0.0, (s.expires_at - now_ns) / 1e9) if s.expires_at else None,
        "silent": s.silent, "drop_armed": s.drop_armed, "text": s.text, "max_open_orders": max_open,
        "orders": [{"clordid": o.clordid, "symbol": o.symbol, "side": SIDE_NAMES.get(o.side, str(o.side)),
                    "price": o.price, "qty": o.qty, "cum_qty": o.cum_qty, "leaves_qty": o.leaves_qty,
                    "status": ORD_STATUS.get(o.status, o.status)} for o in s.orders],
    }


def notice_view(n: LabNotice) -> JSON:
    return {"type": "notice", "level": n.level if n.level in ("info", "error") else "info", "text": n.text}


def error_view(text: str, code: str, cmd_id: str | None = None) -> JSON:
    out: JSON = {"type": "error", "code": code, "text": text}
    if cmd_id is not None:
        out["id"] = cmd_id
    return out


class MarketView:
    """The latest depth, phase and indicative uncross per instrument and the recent tape, in prices
    the visitor reads."""

    def __init__(self, common: CommonSettings, tape_size: int, schedule: Schedule | None = None) -> None:
        self.common = common
        self.schedule = schedule
        self.depth: dict[str, JSON] = {}
        self.tape: deque[JSON] = deque(maxlen=tape_size)
        # symbol -> (phase, the reason it changed, the last Indicative or None): every instrument
        # starts continuous, as the matcher's do.
        self.phases: dict[str, tuple[int, str, Indicative | None]] = {}

    def _px(self, symbol: str, ticks: int) -> str:
        inst = self.common.instrument(symbol)
        return str(inst.to_price(ticks)) if inst else str(ticks)

    def apply(self, msg: MarketMessage, now_ns: int = 0) -> JSON:
        """Apply one market message; the view a page gets for it (``now_ns`` dates a phase's
        countdown to its scheduled uncross)."""
        if isinstance(msg, Depth):
            view = {"type": "depth", "symbol": msg.symbol, "ts": msg.ts,
                    "bids": [[self._px(msg.symbol, p), q, n] for p, q, n in msg.bids],
                    "asks": [[self._px(msg.symbol, p), q, n] for p, q, n in msg.asks]}
            self.depth[msg.symbol] = view
            return view
        if isinstance(msg, PhaseChanged):
            _, _, indicative = self.phases.get(msg.symbol, (PHASE_CONTINUOUS, "", None))
            self.phases[msg.symbol] = (msg.phase, msg.reason, indicative)
            return self.phase_view(msg.symbol, now_ns)
        if isinstance(msg, Indicative):
            phase, reason, _ = self.phases.get(msg.symbol, (PHASE_CONTINUOUS, "", None))
            self.phases[msg.symbol] = (phase, reason, msg)
            return self.phase_view(msg.symbol, now_ns)
        # An auction's trades have no aggressor (the matcher's uncross: aggressor_side 0).
        view = {"type": "trade", "symbol": msg.symbol, "price": self._px(msg.symbol, msg.price),
                "qty": msg.qty, "aggressor": SIDE_NAMES.get(msg.aggressor_side, "none"),
                "auction": msg.aggressor_side not in SIDE_NAMES, "match_id": msg.match_id, "ts": msg.ts}
        self.tape.append(view)
        return view

    def phase_view(self, symbol: str, now_ns: int) -> JSON:
        """An instrument's phase; in a call its indicative uncross (price, volume, imbalance) and,
        when the schedule's next change ends the call, the seconds until that uncross."""
        phase, reason, ind = self.phases.get(symbol, (PHASE_CONTINUOUS, "", None))
        call = phase in CALL_PHASES
        indicative: JSON | None = None
        if call and ind is not None:
            indicative = {"price": self._px(symbol, ind.price) if ind.price else None, "volume": ind.volume,
                          "imbalance_qty": ind.imbalance_qty,
                          "imbalance_side": SIDE_NAMES.get(ind.imbalance_side, "none")}
        uncross_in_s: float | None = None
        if call and self.schedule is not None:
            nxt = self.schedule.next_change(symbol, now_ns)
            if nxt is not None and nxt[1] not in CALL_PHASES:
                uncross_in_s = round(nxt[0], 1)
        return {"type": "phase", "symbol": symbol, "phase": PHASE_NAMES.get(phase, str(phase)),
                "label": PHASE_LABELS.get(phase, str(phase)), "call": call, "reason": reason,
                "indicative": indicative, "uncross_in_s": uncross_in_s}

    def snapshot(self, now_ns: int = 0) -> list[JSON]:
        out: list[JSON] = [self.depth[s] for s in sorted(self.depth)]
        out += [self.phase_view(s, now_ns) for s in sorted(self.phases)]
        out.append({"type": "tape", "trades": list(self.tape)})
        return out


def hello_view(common: CommonSettings, limits: JSON) -> JSON:
    instruments = []
    for i in common.instruments:
        low, high = i.band_ticks
        instruments.append({"symbol": i.symbol, "reference": str(i.to_price(i.reference_ticks)),
                            "tick": str(i.tick), "low": str(i.to_price(low)), "high": str(i.to_price(high))})
    return {"type": "hello", "instruments": instruments, "limits": limits}
