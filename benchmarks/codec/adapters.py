"""The codecs measured, each behind the same three operations per pinned message.

``encode(values)`` builds a whole message (header, BodyLength, CheckSum) from converted values;
``parse(raw)`` parses the bytes, converts the named fields (for W all 20 entries) and raises Mismatch
unless they are the pinned values; the checked parse also checks W's top of book on its own.
Conversion is the same for every text-based adapter (``fixed5``, ``int``) so that the rows differ
by the codec only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from operator import call, itemgetter
from typing import Any

from benchmarks.codec.oracle import (
    BEGIN_STRING,
    ENTRY,
    FIELDS,
    HEADER,
    Mismatch,
    Pinned,
    Values,
    fixed5,
    price_text,
)
from shared.fix.codec import encode, split_fields, split_pairs
from shared.fix.reader import DIGIT, INT, PRICE, TEXT, field_reader

Encode = Callable[[Values], object]
Parse = Callable[[bytes], Values]
MSG_TYPES = {"D": "D", "8": "8", "W": "W"}


def _converter(kind: str) -> Callable[[str], object]:
    return str if kind == "s" else fixed5 if kind == "p" else int


def _text(kind: str, value: object) -> str:
    """A converted value back as FIX text (what an encoder writes)."""
    return price_text(value) if kind == "p" else str(value)  # type: ignore[arg-type]


def _body_items(p: Pinned, values: Values) -> list[tuple[str, str]]:
    """The body fields (tag, text) an encoder writes for ``values``, in the seed's order."""
    items = [(tag, _text(t, v)) for (tag, t), v in zip(FIELDS[p.kind], values[:len(FIELDS[p.kind])],
                                                         strict=True)]
    if p.kind == "W":
        for entry in values[3]:  # type: ignore[attr-defined]
            items += [(tag, _text(t, v)) for (tag, t), v in zip(ENTRY, entry, strict=True)]
    return items


def _check(p: Pinned, got: Values) -> Values:
    if got != p.values:
        raise Mismatch(f"{p.kind}: parsed values differ from the pinned ones")
    return got


def _check_top(p: Pinned, got: Values) -> None:
    """W's checked parse on its own: symbol, entry count and best bid and offer (seed's 9001 set)."""
    entries = p.values[3]
    got_entries = got[3]
    if (got[1], got[2], got_entries[0][1], got_entries[1][1]) != (  # type: ignore[index]
            p.values[1], p.values[2], entries[0][1], entries[1][1]):  # type: ignore[index]
        raise Mismatch("W: top of book differs from the pinned one")


class Adapter:
    """One codec: ``operations(p)`` gives (encode, checked parse, parse + extract) for a message."""

    name = ""
    note = ""

    def parse(self, p: Pinned) -> Parse:
        raise NotImplementedError

    def encoder(self, p: Pinned) -> Encode:
        raise NotImplementedError

    def operations(self, p: Pinned) -> dict[str, Callable[..., object]]:
        parse = self.parse(p)
        if p.kind == "W":
            def checked(raw: bytes) -> None:
                _check_top(p, parse(raw))
        else:
            def checked(raw: bytes) -> None:
                parse(raw)
        return {"encode": self.encoder(p), "checked parse": checked, "parse + extract": parse}


# ------------------------------------------------------------------------------- FIX Lab's codec

class FixLabCodec(Adapter):
    name = "FIX Lab shared.fix.codec"
    note = ("split_fields (the gateway's hot path) for D/8, split_pairs for W's group; D/8's fields "
            "read by itemgetter, converted by map; encode: body from an f-string template, framed by "
            "codec.encode")

    def parse(self, p: Pinned) -> Parse:
        if p.kind != "W":
            # D/8: the fields read from split_fields' dict by one itemgetter call and converted by
            # one map, with the same converters as every adapter (3% fewer instructions than a
            # comprehension; W's group loop measured no better that way and stays a loop).
            get = itemgetter(*(tag for tag, _ in FIELDS[p.kind]))
            converters = tuple(_converter(t) for _, t in FIELDS[p.kind])

            def parse(raw: bytes) -> Values:
                return _check(p, tuple(map(call, converters, get(split_fields(raw.decode("ascii"))))))
            return parse

        def parse_w(raw: bytes) -> Values:
            pairs = split_pairs(raw.decode("ascii"))
            f = dict(pairs)
            count = int(f["268"])
            at = pairs.index(("268", f["268"])) + 1
            entries = []
            for i in range(at, at + 3 * count, 3):
                (t1, kind), (t2, px), (t3, size) = pairs[i:i + 3]
                if t1 != "269" or t2 != "270" or t3 != "271":
                    raise Mismatch(f"W: entry at field {i} is {t1}/{t2}/{t3}")
                entries.append((int(kind), fixed5(px), int(size)))
            return _check(p, (f["262"], f["55"], count, tuple(entries)))
        return parse_w

    def encoder(self, p: Pinned) -> Encode:
        sender, target, seq, sending_time = HEADER[p.kind]
        head = f"35={MSG_TYPES[p.kind]}\x0149={sender}\x0156={target}\x0134={seq}\x0152={sending_time}\x01"
        begin = BEGIN_STRING.encode()
        if p.kind == "D":
            def enc_d(v: Values) -> bytes:
                body = (f"{head}11={v[0]}\x0121={v[1]}\x0155={v[2]}\x0154={v[3]}\x0160={v[4]}\x0138={v[5]}"
                        f"\x0140={v[6]}\x0144={price_text(v[7])}\x0159={v[8]}\x01")  # type: ignore[arg-type]
                return encode(body.encode(), begin)
            return enc_d
        if p.kind == "8":
            def enc_8(v: Values) -> bytes:
                body = (f"{head}37={v[0]}\x0117={v[1]}\x0111={v[2]}\x01150={v[3]}\x0139={v[4]}\x0155={v[5]}"
                        f"\x0154={v[6]}\x0138={v[7]}\x01151={v[8]}\x0114={v[9]}\x016={price_text(v[10])}"  # type: ignore[arg-type]
                        f"\x0160={v[11]}\x01")
                return encode(body.encode(), begin)
            return enc_8

        def enc_w(v: Values) -> bytes:
            entries = "".join([f"269={kind}\x01270={price_text(px)}\x01271={size}\x01"
                               for kind, px, size in v[3]])  # type: ignore[attr-defined]
            body = f"{head}262={v[0]}\x0155={v[1]}\x01268={v[2]}\x01{entries}"
            return encode(body.encode(), begin)
        return enc_w


class FixLabReader(FixLabCodec):
    name = "FIX Lab shared.fix.reader"
    note = ("field_reader: one regular-expression fullmatch checks every field (ASCII, <digits>=<value>"
            "<SOH>) and captures the asked-for tags in any order, W's entries as one block read by "
            "findall; conversions generated as straight-line code: prices to fixed point by partition "
            "and int, quantities by int, FIX char fields (21 54 40 59 150 39 269) by a ten-digit table "
            "(one ASCII digit, stricter than int); encode as the row above")

    def parse(self, p: Pinned) -> Parse:
        fields = tuple((int(tag), _KINDS[int(tag) in CHAR_TAGS, t]) for tag, t in FIELDS[p.kind])
        group = (268, tuple((int(tag), _KINDS[int(tag) in CHAR_TAGS, t]) for tag, t in ENTRY))
        read = field_reader(fields, group if p.kind == "W" else None)
        expected = p.values

        def parse(raw: bytes) -> Values:
            got = read(raw)
            if got != expected:
                raise Mismatch(f"{p.kind}: parsed values differ from the pinned ones")
            return got
        return parse


# FIX 4.2's CHAR fields among seed 004's: each holds one digit here, read by shared.fix.reader's DIGIT.
CHAR_TAGS = frozenset((21, 54, 40, 59, 150, 39, 269))
_KINDS = {(False, "s"): TEXT, (False, "i"): INT, (False, "p"): PRICE, (True, "i"): DIGIT}


# ------------------------------------------------------------------------------- simplefix

class Simplefix(Adapter):
    name = "simplefix"
    note = "FixParser.get_message, FixMessage.get for fields and .pairs for W's group; FixMessage.encode"

    def __init__(self) -> None:
        import simplefix

        self.simplefix = simplefix
        self.parser = simplefix.FixParser()

    def parse(self, p: Pinned) -> Parse:
        spec = tuple((int(tag), _converter(t)) for tag, t in FIELDS[p.kind])
        parser = self.parser

        def message(raw: bytes) -> Any:
            parser.append_buffer(raw)
            msg = parser.get_message()
            if msg is None:
                raise Mismatch("simplefix: no whole message")
            return msg

        if p.kind != "W":
            def parse(raw: bytes) -> Values:
                msg = message(raw)
                return _check(p, tuple([conv(msg.get(tag).decode()) for tag, conv in spec]))
            return parse

        def parse_w(raw: bytes) -> Values:
            msg = message(raw)
            pairs = msg.pairs
            count = int(msg.get(268))
            at = next(i for i, (tag, _) in enumerate(pairs) if tag == b"268") + 1
            entries = []
            for i in range(at, at + 3 * count, 3):
                (t1, kind), (t2, px), (t3, size) = pairs[i:i + 3]
                if t1 != b"269" or t2 != b"270" or t3 != b"271":
                    raise Mismatch(f"W: entry at field {i} is {t1!r}/{t2!r}/{t3!r}")
                entries.append((int(kind), fixed5(px.decode()), int(size)))
            return _check(p, (msg.get(262).decode(), msg.get(55).decode(), count, tuple(entries)))
        return parse_w

    def encoder(self, p: Pinned) -> Encode:
        fix_message = self.simplefix.FixMessage
        sender, target, seq, sending_time = HEADER[p.kind]

        def enc(v: Values) -> bytes:
            msg = fix_message()
            msg.append_pair(8, BEGIN_STRING, header=True)
            msg.append_pair(35, MSG_TYPES[p.kind], header=True)
            msg.append_pair(49, sender, header=True)
            msg.append_pair(56, target, header=True)
            msg.append_pair(34, seq, header=True)
            msg.append_pair(52, sending_time, header=True)
            for tag, text in _body_items(p, v):
                msg.append_pair(tag, text)
            return bytes(msg.encode())
        return enc


# ------------------------------------------------------------------------------- QuickFIX

def _data_dictionary() -> Any:
    import quickfix as fix

    return fix.DataDictionary(f"{sys.prefix}/share/quickfix/FIX42.xml")  # the fixtures are FIX.4.2


class QuickfixStrings(Adapter):
    name = "QuickFIX Python, string access"
    note = "fix.Message(text, FIX42 dictionary); getField(int) strings, getGroup for W; setField(int, str)"

    def __init__(self) -> None:
        import quickfix as fix
        import quickfix42 as fix42

        self.fix = fix
        self.group = fix42.MarketDataSnapshotFullRefresh.NoMDEntries
        self.dd = _data_dictionary()

    def parse(self, p: Pinned) -> Parse:
        spec = tuple((int(tag), _converter(t)) for tag, t in FIELDS[p.kind])
        message, dd = self.fix.Message, self.dd
        if p.kind != "W":
            def parse(raw: bytes) -> Values:
                msg = message(raw.decode("ascii"), dd, False)
                return _check(p, tuple([conv(msg.getField(tag)) for tag, conv in spec]))
            return parse
        group = self.group()

        def parse_w(raw: bytes) -> Values:
            msg = message(raw.decode("ascii"), dd, False)
            count = int(msg.getField(268))
            entries = []
            for i in range(1, count + 1):
                msg.getGroup(i, group)
                entries.append((int(group.getField(269)), fixed5(group.getField(270)),
                                int(group.getField(271))))
            return _check(p, (msg.getField(262), msg.getField(55), count, tuple(entries)))
        return parse_w

    def encoder(self, p: Pinned) -> Encode:
        fix, group = self.fix, self.group
        sender, target, seq, sending_time = HEADER[p.kind]
        n_head = len(FIELDS[p.kind])

        def enc(v: Values) -> str:
            msg = fix.Message()
            header = msg.getHeader()
            header.setField(8, BEGIN_STRING)
            header.setField(35, MSG_TYPES[p.kind])
            header.setField(49, sender)
            header.setField(56, target)
            header.setField(34, str(seq))
            header.setField(52, sending_time)
            items = _body_items(p, v)
            for tag, text in items[:n_head]:
                msg.setField(int(tag), text)
            if len(items) > n_head:
                g = group()  # one entry object, refilled per entry: addGroup copies it (QuickFIX's docs)
                for i in range(n_head, len(items), 3):
                    for tag, text in items[i:i + 3]:
                        g.setField(int(tag), text)
                    msg.addGroup(g)
            return str(msg.toString())
        return enc


class QuickfixTyped(Adapter):
    name = "QuickFIX Python, typed fields"
    note = ("fix.Message(text, FIX42 dictionary); typed field objects read with getFieldIfSet "
            "(getField(field) costs ~30-70 us per call in SWIG's overload dispatch); setField(fix.X(...))")

    def __init__(self) -> None:
        import quickfix as fix
        import quickfix42 as fix42

        self.fix = fix
        self.group = fix42.MarketDataSnapshotFullRefresh.NoMDEntries
        self.dd = _data_dictionary()
        self.classes = {
            "11": fix.ClOrdID, "21": fix.HandlInst, "55": fix.Symbol, "54": fix.Side, "60": fix.TransactTime,
            "38": fix.OrderQty, "40": fix.OrdType, "44": fix.Price, "59": fix.TimeInForce, "37": fix.OrderID,
            "17": fix.ExecID, "150": fix.ExecType, "39": fix.OrdStatus, "151": fix.LeavesQty,
            "14": fix.CumQty, "6": fix.AvgPx, "262": fix.MDReqID, "268": fix.NoMDEntries,
            "269": fix.MDEntryType, "270": fix.MDEntryPx, "271": fix.MDEntrySize}
        # Typed values: text, chars and timestamps as their FIX text; quantities and prices as floats.
        self.typed_kind = {"60": "time", "21": "char", "54": "char", "40": "char", "59": "char",
                           "150": "char", "39": "char", "269": "char", "38": "qty", "151": "qty",
                           "14": "qty", "271": "qty", "268": "int"}

    def _reader(self, tag: str, kind: str) -> Callable[[Any], object]:
        f = self.classes[tag]()
        how = self.typed_kind.get(tag, "price" if kind == "p" else "str")

        def read(fields: Any) -> object:
            if not fields.getFieldIfSet(f):
                raise Mismatch(f"tag {tag} missing")
            if how == "str":
                return f.getValue()
            if how == "time":
                return f.getString()
            if how == "price":
                return round(f.getValue() * 100000)
            return int(f.getValue())  # char digits, int, and whole quantities
        return read

    def parse(self, p: Pinned) -> Parse:
        readers = tuple(self._reader(tag, t) for tag, t in FIELDS[p.kind])
        message, dd = self.fix.Message, self.dd
        if p.kind != "W":
            def parse(raw: bytes) -> Values:
                msg = message(raw.decode("ascii"), dd, False)
                return _check(p, tuple([read(msg) for read in readers]))
            return parse
        group = self.group()
        entry = tuple(self._reader(tag, t) for tag, t in ENTRY)

        def parse_w(raw: bytes) -> Values:
            msg = message(raw.decode("ascii"), dd, False)
            head = [read(msg) for read in readers]
            count = head[2]
            entries = []
            for i in range(1, count + 1):  # type: ignore[operator]
                msg.getGroup(i, group)
                entries.append(tuple([read(group) for read in entry]))
            return _check(p, (*head, tuple(entries)))
        return parse_w

    def encoder(self, p: Pinned) -> Encode:
        fix, group, classes = self.fix, self.group, self.classes
        sender, target, seq, sending_time = HEADER[p.kind]
        kinds = [t for _, t in FIELDS[p.kind]] + [t for _, t in ENTRY] * 20
        n_head = len(FIELDS[p.kind])
        typed = self.typed_kind

        def field(tag: str, kind: str, value: object) -> Any:
            how = typed.get(tag, "price" if kind == "p" else "str")
            if how == "time":
                f = classes[tag]()
                f.setString(str(value))
                return f
            if how == "price":
                return classes[tag](value / 100000)  # type: ignore[operator]
            if how == "char":
                return classes[tag](str(value))
            return classes[tag](value)

        def enc(v: Values) -> str:
            msg = fix.Message()
            header = msg.getHeader()
            header.setField(fix.BeginString(BEGIN_STRING))
            header.setField(fix.MsgType(MSG_TYPES[p.kind]))
            header.setField(fix.SenderCompID(sender))
            header.setField(fix.TargetCompID(target))
            header.setField(fix.MsgSeqNum(seq))
            sent = fix.SendingTime()
            sent.setString(sending_time)
            header.setField(sent)
            tags = [tag for tag, _ in FIELDS[p.kind]]
            for tag, kind, value in zip(tags, kinds[:n_head], v[:n_head], strict=True):
                msg.setField(field(tag, kind, value))
            if p.kind == "W":
                g = group()  # one entry object, refilled per entry: addGroup copies it (QuickFIX's docs)
                for e in v[3]:  # type: ignore[attr-defined]
                    for (tag, kind), value in zip(ENTRY, e, strict=True):
                        g.setField(field(tag, kind, value))
                    msg.addGroup(g)
            return str(msg.toString())
        return enc


def adapters() -> list[Adapter]:
    """Every adapter this machine can run (QuickFIX and simplefix are dev dependencies)."""
    return [QuickfixTyped(), QuickfixStrings(), Simplefix(), FixLabCodec(), FixLabReader()]
