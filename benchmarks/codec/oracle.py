"""Seed 004's pinned messages, the values a checked parse must find in them, and the mutation probes.

The messages are read from ../shared/fixtures/codec/ (never copied here). Their tags 9001/9002 are the
seed's field-work hashes: FNV-1a (32 bit) over the converted values, each type-marked and followed
by byte 1: ``i`` + unsigned integer as 8 bytes little-endian, ``p`` + price as a scale-five fixed
point integer likewise, ``s`` + ASCII text. ``expected()`` reads the values and proves them against
those hashes once; a timed operation then checks what it converted against them by equality.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared.fix.codec import framing_problems, split_pairs

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "codec"
FILES = {"D": "new_order_single_D.fix", "8": "execution_report_8.fix", "W": "market_data_snapshot_W.fix"}
NAMES = {"D": "NewOrderSingle", "8": "ExecutionReport", "W": "MarketDataSnapshot (10 levels)"}

# The business fields seed 004 names, in its order, with the oracle's type: i, p (price) or s.
FIELDS = {
    "D": (("11", "s"), ("21", "i"), ("55", "s"), ("54", "i"), ("60", "s"), ("38", "i"), ("40", "i"),
          ("44", "p"), ("59", "i")),
    "8": (("37", "s"), ("17", "s"), ("11", "s"), ("150", "i"), ("39", "i"), ("55", "s"), ("54", "i"),
          ("38", "i"), ("151", "i"), ("14", "i"), ("6", "p"), ("60", "s")),
    "W": (("262", "s"), ("55", "s"), ("268", "i")),
}
ENTRY = (("269", "i"), ("270", "p"), ("271", "i"))  # one MarketDataSnapshot entry
# The header the encoders write (FIX.4.2 like the fixtures).
HEADER = {"D": ("CLIENT", "SERVER", 8, "20260703-19:28:00.123"),
          "8": ("CLIENT", "SERVER", 9, "20260703-19:28:00.123"),
          "W": ("CLIENT", "SERVER", 10, "20260703-19:28:00.123")}
BEGIN_STRING = "FIX.4.2"

# Seed 004's mutation probes: each keeps BodyLength and CheckSum valid and leaves 9001/9002 stale.
PROBES = {
    "D": (("price 44=1.08245 -> 1.08254", b"\x0144=1.08245\x01", b"\x0144=1.08254\x01"),),
    "8": (("order id 37=EX123456 -> FX123356", b"\x0137=EX123456\x01", b"\x0137=FX123356\x01"),),
    "W": (("symbol 55=AUD/NZD -> BUD/NYD", b"\x0155=AUD/NZD\x01", b"\x0155=BUD/NYD\x01"),
          ("second level 1.08240/1.08246 -> 1.08250/1.08236",
           b"270=1.08240\x01271=1000000\x01269=1\x01270=1.08246\x01",
           b"270=1.08250\x01271=1000000\x01269=1\x01270=1.08236\x01"),
          ("last size 271=1000000 -> 0100000", b"271=1000000\x019001=", b"271=0100000\x019001=")),
}

Values = tuple[object, ...]


class Mismatch(Exception):
    """A parse found values other than the pinned ones: the check a mutation probe must trip."""


def fixed5(text: str) -> int:
    """A decimal price as a scale-five fixed-point integer ("1.08245" -> 108245); exact, no float."""
    whole, _, frac = text.partition(".")
    if len(frac) > 5 or not whole.isdigit() or not (frac.isdigit() or not frac):
        raise ValueError(f"not a price with at most 5 decimals: {text!r}")
    return int(whole + frac.ljust(5, "0"))


def price_text(fixed: int) -> str:
    """A scale-five fixed-point price as FIX text (108245 -> "1.08245")."""
    return f"{fixed // 100000}.{fixed % 100000:05d}"


def fnv1a(values: Values, types: str) -> int:
    """The seed's field-work hash of converted ``values`` typed by ``types`` (i, p, s)."""
    h = 0x811C9DC5
    for value, kind in zip(values, types, strict=True):
        if kind == "s":
            data = b"s" + str(value).encode("ascii")
        else:
            data = kind.encode() + int(str(value)).to_bytes(8, "little")
        for byte in data + b"\x01":
            h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


@dataclass(frozen=True, slots=True)
class Pinned:
    """One pinned message: its bytes and the converted values a checked parse must find."""

    kind: str
    raw: bytes
    values: Values  # D/8: the named fields; W: (262, 55, 268, ((269, 270, 271) x 20))

    def flat(self) -> tuple[Values, str]:
        """The values as the oracle hashes them for 9002, with their types."""
        if self.kind != "W":
            return self.values, "".join(t for _, t in FIELDS[self.kind])
        head, entries = self.values[:3], self.values[3]
        flat = list(head)
        for entry in entries:  # type: ignore[attr-defined]
            flat.extend(entry)
        return tuple(flat), "ssi" + "ipi" * len(entries)  # type: ignore[arg-type]


def _convert(text: str, kind: str) -> object:
    return text if kind == "s" else fixed5(text) if kind == "p" else int(text)


def values_of(kind: str, raw: bytes) -> Values:
    """The converted values of a message of ``kind`` (how the oracle reads it; checks encoders)."""
    pairs = split_pairs(raw.decode("ascii"))
    first = dict(reversed(pairs))
    head = tuple(_convert(first[tag], t) for tag, t in FIELDS[kind])
    if kind != "W":
        return head
    group = [v for tag, v in pairs if tag in ("269", "270", "271")]
    entries = tuple(tuple(_convert(group[i + j], ENTRY[j][1]) for j in range(3))
                    for i in range(0, len(group), 3))
    return (*head, entries)


def load(kind: str, folder: Path = FIXTURES) -> Pinned:
    """Read a pinned message and prove its values against the seed's hashes (ValueError if not)."""
    raw = (folder / FILES[kind]).read_bytes()
    if framing_problems(raw):
        raise ValueError(f"{FILES[kind]}: {framing_problems(raw)}")
    first = dict(reversed(split_pairs(raw.decode("ascii"))))
    pinned = Pinned(kind, raw, values_of(kind, raw))
    flat, types = pinned.flat()
    if fnv1a(flat, types) != int(first["9002"]):
        raise ValueError(f"{FILES[kind]}: the values do not hash to 9002={first['9002']}")
    if kind == "W":
        v = pinned.values
        top = (v[1], v[2], v[3][0][1], v[3][1][1])  # type: ignore[index]
        if fnv1a(top, "sipp") != int(first["9001"]):
            raise ValueError(f"{FILES[kind]}: the top of book does not hash to 9001={first['9001']}")
    return pinned


def mutated(pinned: Pinned) -> list[tuple[str, bytes]]:
    """The pinned message under each of the seed's probes (framing still valid: checked here)."""
    out = []
    for name, old, new in PROBES[pinned.kind]:
        if pinned.raw.count(old) != 1:
            raise ValueError(f"probe {name!r}: {old!r} is not once in the pinned message")
        raw = pinned.raw.replace(old, new)
        if framing_problems(raw):
            raise ValueError(f"probe {name!r} breaks framing: {framing_problems(raw)}")
        out.append((name, raw))
    return out
