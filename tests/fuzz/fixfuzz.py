"""A FIX fuzzer for the live acceptor: a corpus, Hypothesis strategies that mutate it, and a driver
that sends the results over raw TCP sockets to a running gateway.

The corpus is QuickFIX's own FIX 4.4 acceptance definitions (read from ../shared/conformance, never
copied here) plus this exchange's messages. Each input is one seed, a few field mutations (swaps,
drops, repeated tags, huge values, wrong group counts, NUL and non-UTF-8 bytes, unknown tags), then
a framing damage (BodyLength, CheckSum, BeginString, truncation) and a way of sending it (whole, or
in fragments over many reads), after a Logon on a kept connection or on a fresh socket before any.

    corpus = build_corpus(conformance_dir)
    with FixFuzzDriver(port, comps=[...]) as driver:
        driver.feed(an_input)            # from fuzz_inputs(corpus)
    driver.stats                           # counts by what came back

The driver keeps its sessions in step by itself: it answers TestRequests, answers a ResendRequest
with a SequenceReset (reset mode), probes each connection with a TestRequest every so often and
logs on again (141=Y) when the acceptor logged it out, closed the socket or stopped answering.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import strategies as st

from tests.gateway_stack import fix_now

SOH = b"\x01"
Fields = list[tuple[bytes, bytes]]

# Header tags the driver writes itself (in place when the seed has them, else after 35).
_OWN_HEADER = {b"49", b"56", b"34", b"52"}
# Counters of repeating groups that FIX 4.4 messages the exchange knows (or may be sent) carry.
GROUP_COUNTERS = (b"453", b"386", b"78", b"73", b"146", b"267", b"268", b"555", b"382", b"454", b"232")
UNKNOWN_TAGS = (b"9999", b"5000", b"0", b"-1", b"abc", b"", b"00035", b"99999999999999999999")
NASTY_VALUES = (b"", b"\x00", b"\xff\xfe\xfd", b"\xc3\x28", b"-0", b"1e9", b"NaN", b"-1",
                b"99999999999999999999999", b"0.0000000001", b"+100", b" 100", b"100 ", b"=",
                b"\x01", b"8=FIX.4.4", b"\x7f", "\u00e9\u4e2d".encode(), b"%s%n%x", b"<script>")


def _now() -> bytes:
    return fix_now().encode()


def _own_seeds() -> list[Fields]:
    """The exchange's own messages: orders, cancels, replaces, status, groups, admin."""
    def f(*pairs: tuple[int, str]) -> Fields:
        return [(str(t).encode(), v.encode()) for t, v in pairs]
    t = "<TIME>"
    nos = f((35, "D"), (11, "fz-1"), (55, "ACORN.LAB"), (54, "1"), (60, t), (38, "10"), (40, "2"),
            (44, "95.00"), (59, "0"))
    sell = f((35, "D"), (11, "fz-2"), (55, "ACORN.LAB"), (54, "2"), (60, t), (38, "5"), (40, "2"),
             (44, "105.00"))
    ioc = f((35, "D"), (11, "fz-3"), (55, "ACORN.LAB"), (54, "2"), (60, t), (38, "3"), (40, "2"),
            (44, "90.00"), (59, "3"))
    parties = f((35, "D"), (11, "fz-4"), (453, "2"), (448, "A"), (447, "D"), (452, "1"), (448, "B"),
                (447, "D"), (452, "3"), (55, "ACORN.LAB"), (54, "1"), (60, t), (38, "1"), (40, "2"),
                (44, "99.00"))
    cancel = f((35, "F"), (41, "fz-1"), (11, "fz-c1"), (55, "ACORN.LAB"), (54, "1"), (60, t))
    replace = f((35, "G"), (41, "fz-1"), (11, "fz-r1"), (55, "ACORN.LAB"), (54, "1"), (60, t),
                (38, "12"), (40, "2"), (44, "96.00"))
    status = f((35, "H"), (11, "fz-1"), (55, "ACORN.LAB"), (54, "1"))
    mass = f((35, "q"), (11, "fz-m1"), (530, "7"), (60, t))
    mdr = f((35, "V"), (262, "md1"), (263, "1"), (264, "5"), (267, "2"), (269, "0"), (269, "1"),
            (146, "1"), (55, "ACORN.LAB"))
    test = f((35, "1"), (112, "fuzz"))
    heartbeat = f((35, "0"),)
    news = f((35, "B"), (148, "headline"), (33, "1"), (58, "text"))
    # Orders weigh more: they are what reaches the publisher, the matcher and back.
    return [nos, nos, sell, sell, ioc, parties, cancel, replace, status, mass, mdr, test, heartbeat, news]


def _split(line: bytes) -> Fields:
    out: Fields = []
    for item in line.split(SOH):
        if item:
            tag, _, value = item.partition(b"=")
            out.append((tag, value))
    return out


def conformance_seeds(folder: Path) -> list[Fields]:
    """Every message the acceptance definitions send (I lines), minus BeginString, BodyLength and
    CheckSum, with their TW/ISLD header left for the driver to rewrite."""
    seen: set[bytes] = set()
    out: list[Fields] = []
    for path in sorted(folder.glob("*.def")):
        for line in path.read_bytes().splitlines():
            if not line.startswith(b"I8="):
                continue
            fields = [(t, v) for t, v in _split(line[1:]) if t not in (b"8", b"9", b"10")]
            key = SOH.join(t + b"=" + v for t, v in fields if t not in (b"34", b"52"))
            if fields and key not in seen:
                seen.add(key)
                out.append(fields)
    return out


def build_corpus(conformance: Path | None) -> list[Fields]:
    seeds = _own_seeds()
    if conformance is not None:
        seeds += conformance_seeds(conformance)
    return seeds


# --------------------------------------------------------------------------- inputs

@dataclass(frozen=True)
class FuzzInput:
    """One seed, its mutations and how it goes on the wire (everything drawn by Hypothesis)."""

    seed: int
    mutations: tuple[tuple[str, int, int], ...]  # (kind, a, b): a and b pick fields and values
    length: str  # ok, short, long, huge, text, missing
    checksum: str  # ok, wrong, missing, text, long
    begin: str  # ok, other, missing
    truncate: int  # 0: whole; else cut this many bytes from the end
    fragments: int  # 1: one write; else this many writes
    before_logon: bool
    salt: int  # picks values from the nasty list, sizes of huge values


MUTATIONS = ("swap", "drop", "repeat", "huge", "nasty", "group_count", "unknown_tag", "empty",
             "msgtype", "soh_in_value", "digits")


@st.composite
def fuzz_inputs(draw: st.DrawFn, corpus_size: int) -> FuzzInput:
    n_mut = draw(st.integers(0, 3))
    muts = tuple(draw(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 255), st.integers(0, 255)))
                 for _ in range(n_mut))
    return FuzzInput(
        seed=draw(st.integers(0, corpus_size - 1)),
        mutations=muts,
        length=draw(st.sampled_from(("ok",) * 12 + ("short", "long", "huge", "text", "missing"))),
        checksum=draw(st.sampled_from(("ok",) * 12 + ("wrong", "missing", "text", "long"))),
        begin=draw(st.sampled_from(("ok",) * 20 + ("other", "missing"))),
        truncate=draw(st.sampled_from((0,) * 20 + (1, 3, 10, 40))),
        fragments=draw(st.sampled_from((1,) * 15 + (2, 3, 7, 30))),
        before_logon=draw(st.sampled_from((False,) * 40 + (True,))),
        salt=draw(st.integers(0, 2**16)),
    )


def mutate(fields: Fields, mutations: tuple[tuple[str, int, int], ...], salt: int) -> Fields:
    """Apply field mutations (pure: the same input gives the same bytes)."""
    out = list(fields)
    for kind, a, b in mutations:
        if not out:
            break
        i, j = a % len(out), b % len(out)
        tag, value = out[i]
        if kind == "swap":
            out[i], out[j] = out[j], out[i]
        elif kind == "drop":
            del out[i]
        elif kind == "repeat":
            out.insert(j, (tag, NASTY_VALUES[b % len(NASTY_VALUES)] if b % 2 else value))
        elif kind == "huge":
            size = (1 << (8 + salt % 10)) + b  # 256 B .. 128 KiB
            out[i] = (tag, (value or b"9") * (size // max(1, len(value)) + 1))
        elif kind == "nasty":
            out[i] = (tag, NASTY_VALUES[(b + salt) % len(NASTY_VALUES)])
        elif kind == "group_count":
            counter = GROUP_COUNTERS[b % len(GROUP_COUNTERS)]
            count = (b"0", b"1", b"2", b"3", b"-1", b"999999", b"x", b"")[(a + salt) % 8]
            hit = [k for k, (t, _) in enumerate(out) if t == counter]
            if hit:
                out[hit[0]] = (counter, count)
            else:
                out.insert(i, (counter, count))
        elif kind == "unknown_tag":
            out.insert(i, (UNKNOWN_TAGS[b % len(UNKNOWN_TAGS)], NASTY_VALUES[a % len(NASTY_VALUES)]))
        elif kind == "empty":
            out[i] = (tag, b"")
        elif kind == "msgtype":
            k = next((k for k, (t, _) in enumerate(out) if t == b"35"), None)
            kinds = (b"D", b"F", b"G", b"H", b"8", b"A", b"5", b"4", b"2", b"j", b"q", b"V", b"ZZ", b"",
                     b"\xff", b"0")
            if k is not None:
                out[k] = (b"35", kinds[b % len(kinds)])
        elif kind == "soh_in_value":
            cut = a % (len(value) + 1)
            out[i] = (tag, value[:cut] + SOH + value[cut:])
        elif kind == "digits":
            out[i] = (tag, str((salt * 7919 + b) % 10 ** (1 + a % 25) * (-1 if a % 5 == 0 else 1)).encode())
    return out


def with_header(fields: Fields, comp: str, seq: int) -> Fields:
    """Our CompIDs, sequence number and SendingTime, in place where the seed has them."""
    now = _now()
    ours = {b"49": comp.encode(), b"56": b"FIXLAB", b"34": str(seq).encode(), b"52": now}
    out: Fields = []
    present = set()
    for tag, value in fields:
        if tag in ours:
            present.add(tag)
            out.append((tag, ours[tag]))
        else:
            out.append((tag, value.replace(b"<TIME>", now) if value.startswith(b"<TIME") else value))
    missing = [(t, ours[t]) for t in (b"49", b"56", b"34", b"52") if t not in present]
    k = next((k + 1 for k, (t, _) in enumerate(out) if t == b"35"), 0)
    return out[:k] + missing + out[k:]


def encode(fields: Fields, inp: FuzzInput) -> tuple[bytes, bool]:
    """The bytes on the wire, and whether the framing is intact (the acceptor may count it)."""
    body = b"".join(t + b"=" + v + SOH for t, v in fields)
    begin = {"ok": b"8=FIX.4.4\x01", "other": b"8=FIX.4.2\x01", "missing": b""}[inp.begin]
    n = len(body)
    length = {"ok": f"9={n}\x01".encode(), "short": f"9={max(0, n - 1 - inp.salt % 20)}\x01".encode(),
              "long": f"9={n + 1 + inp.salt % 20}\x01".encode(), "huge": b"9=2147483647\x01",
              "text": b"9=abc\x01", "missing": b""}[inp.length]
    head = begin + length + body
    total = sum(head) % 256
    checksum = {"ok": f"10={total:03d}\x01".encode(), "wrong": f"10={(total + 1) % 256:03d}\x01".encode(),
                "missing": b"", "text": b"10=ab\x01", "long": f"10=0{total:03d}\x01".encode()}[inp.checksum]
    raw = head + checksum
    if inp.truncate:
        raw = raw[:max(1, len(raw) - inp.truncate)]
    intact = (inp.begin == inp.length == inp.checksum == "ok" and not inp.truncate)
    return raw, intact


def fragments(raw: bytes, n: int) -> list[bytes]:
    if n <= 1 or len(raw) < 2:
        return [raw]
    step = max(1, len(raw) // n)
    return [raw[k:k + step] for k in range(0, len(raw), step)]


# --------------------------------------------------------------------------- the driver

def _parse(raw: bytes) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for item in raw.split(SOH):
        tag, _, value = item.partition(b"=")
        out.setdefault(tag, value)
    return out


def _frame(fields: list[tuple[int, object]]) -> bytes:
    body = b"".join(f"{t}={v}".encode() + SOH for t, v in fields)
    head = b"8=FIX.4.4\x01" + f"9={len(body)}".encode() + SOH + body
    return head + f"10={sum(head) % 256:03d}".encode() + SOH


class Conn:
    """One logged-on fuzz connection (a raw socket speaking just enough FIX to stay in step)."""

    def __init__(self, port: int, comp: str, stats: Counter[str]) -> None:
        self.port, self.comp, self.stats = port, comp, stats
        self.seq = 1
        self.buf = b""
        self.dead = False
        self.since_probe = 0
        self.resets = 0
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send_admin("A", [(98, 0), (108, 30), (141, "Y")])
        if self.wait_for(b"A", timeout_s=5) is None:
            self.close()
            raise ConnectionError(f"{comp}: no Logon answer")

    def send_admin(self, msg_type: str, fields: list[tuple[int, object]]) -> None:
        header: list[tuple[int, object]] = [(35, msg_type), (49, self.comp), (56, "FIXLAB"), (34, self.seq),
                                            (52, fix_now())]
        self.sock.sendall(_frame(header + fields))
        self.seq += 1

    def close(self) -> None:
        self.dead = True
        with contextlib.suppress(OSError):
            self.sock.close()

    def _messages(self) -> Iterator[dict[bytes, bytes]]:
        while True:
            end = self.buf.find(b"\x0110=")
            if end < 0:
                return
            stop = self.buf.find(SOH, end + 1)
            if stop < 0:
                return
            raw, self.buf = self.buf[:stop + 1], self.buf[stop + 1:]
            yield _parse(raw)

    def _handle(self, msg: dict[bytes, bytes]) -> None:
        kind = msg.get(b"35", b"?")
        self.stats[f"got 35={kind.decode('latin-1')}"] += 1
        if kind == b"1":
            self.send_admin("0", [(112, msg.get(b"112", b"").decode("latin-1"))])
        elif kind == b"2":
            # Whatever we sent out of step: a SequenceReset (reset mode, whose own number does not
            # count) moves the acceptor's expectation to our next number.
            header: list[tuple[int, object]] = [(35, "4"), (49, self.comp), (56, "FIXLAB"), (34, self.seq),
                                                (52, fix_now()), (36, self.seq)]
            self.sock.sendall(_frame(header))
            self.resets += 1
        elif kind == b"5":
            self.close()

    def drain(self, wait_s: float = 0.0) -> bool:
        """Read what has arrived (waiting up to ``wait_s`` for the first bytes); False once closed."""
        if self.dead:
            return False
        try:
            ready, _, _ = select.select([self.sock], [], [], wait_s)
            while ready:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    self.close()
                    return False
                self.buf += chunk
                for msg in self._messages():
                    self._handle(msg)
                    if self.dead:
                        return False
                ready, _, _ = select.select([self.sock], [], [], 0)
        except OSError:
            self.close()
            return False
        return True

    def wait_for(self, kind: bytes, test_req_id: bytes | None = None, timeout_s: float = 3.0
                 ) -> dict[bytes, bytes] | None:
        deadline = time.monotonic() + timeout_s
        while not self.dead:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                ready, _, _ = select.select([self.sock], [], [], left)
                if not ready:
                    continue
                chunk = self.sock.recv(1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                self.close()
                return None
            self.buf += chunk
            for msg in self._messages():
                self._handle(msg)
                if msg.get(b"35") == kind and (test_req_id is None or msg.get(b"112") == test_req_id):
                    return msg
        return None

    def probe(self) -> bool:
        """A TestRequest answered by its Heartbeat: the session is alive and in step."""
        self.since_probe = 0
        for _ in range(3):  # a ResendRequest answered by a reset drops the TestRequest: ask again
            tid = f"probe-{self.seq}"
            resets = self.resets
            self.send_admin("1", [(112, tid)])
            if self.wait_for(b"0", tid.encode(), timeout_s=2.0) is not None:
                return True
            if self.dead or self.resets == resets:
                return False
        return False

    def send(self, pieces: list[bytes], counts: bool) -> None:
        for k, piece in enumerate(pieces):
            self.sock.sendall(piece)
            if k + 1 < len(pieces):
                time.sleep(0.0005)  # separate reads on the acceptor's side
        if counts:
            self.seq += 1
        self.since_probe += 1


@dataclass
class FixFuzzDriver:
    """Feeds inputs to ``slots`` logged-on connections in turn; reconnects as needed."""

    port: int
    comps: list[str]  # CompIDs for the kept connections, used in turn on reconnects
    pre_logon_comps: list[str]  # CompIDs written on inputs sent before any Logon
    corpus: list[Fields]
    slots: int = 3
    probe_every: int = 200
    stats: Counter[str] = field(default_factory=Counter)
    conns: list[Conn | None] = field(default_factory=list)
    _turn: int = 0
    _next_comp: int = 0

    def __enter__(self) -> FixFuzzDriver:
        self.conns = [None] * self.slots
        return self

    def __exit__(self, *exc: object) -> None:
        for c in self.conns:
            if c is not None and not c.dead:
                with contextlib.suppress(OSError):
                    c.send_admin("5", [])
                    c.wait_for(b"5", timeout_s=2)
                c.close()

    def _connect(self) -> Conn:
        last: Exception | None = None
        for attempt in range(60):
            comp = self.comps[self._next_comp % len(self.comps)]
            self._next_comp += 1
            if any(c is not None and not c.dead and c.comp == comp for c in self.conns):
                continue
            try:
                conn = Conn(self.port, comp, self.stats)
                self.stats["logons"] += 1
                return conn
            except (OSError, ConnectionError) as exc:  # the acceptor has not let go of it yet
                last = exc
                self.stats["logon retries"] += 1
                time.sleep(min(0.5, 0.01 * (attempt + 1)))
        raise ConnectionError(f"no fuzz connection could log on: {last}")

    def _conn(self, slot: int) -> Conn:
        conn = self.conns[slot]
        if conn is None or conn.dead:
            if conn is not None:
                self.stats["reconnects"] += 1
            conn = self.conns[slot] = self._connect()
        return conn

    def feed(self, inp: FuzzInput) -> None:
        self.stats["inputs"] += 1
        seed = self.corpus[inp.seed % len(self.corpus)]
        if inp.before_logon:
            self._before_logon(seed, inp)
            return
        slot = self._turn % self.slots
        self._turn += 1
        conn = self._conn(slot)
        fields = mutate(with_header(seed, conn.comp, conn.seq), inp.mutations, inp.salt)
        raw, intact = encode(fields, inp)
        self.stats["bytes"] += len(raw)
        try:
            conn.send(fragments(raw, inp.fragments), intact)
        except OSError:
            conn.close()
            return
        if not intact or inp.length == "huge":
            self.stats["damaged framing"] += 1
        if inp.length == "huge":
            # The acceptor now waits for 2 GiB that never come: this connection is spent. (A short
            # cut or a slightly long BodyLength only swallows the start of what follows: the parser
            # finds the next 8= and the probe below brings the numbers back in step.)
            conn.close()
            return
        conn.drain()
        if not conn.dead and conn.since_probe >= self.probe_every and not conn.probe():
            # Out of step beyond what a reset mends (e.g. a BodyLength that swallowed a probe): anew.
            self.stats["probe failures"] += 1
            conn.close()

    def _before_logon(self, seed: Fields, inp: FuzzInput) -> None:
        comp = self.pre_logon_comps[inp.salt % len(self.pre_logon_comps)]
        fields = mutate(with_header(seed, comp, 1), inp.mutations, inp.salt)
        raw, _ = encode(fields, inp)
        self.stats["before logon"] += 1
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                for piece in fragments(raw, inp.fragments):
                    s.sendall(piece)
                s.settimeout(0.01)
                with contextlib.suppress(OSError):
                    if s.recv(65536) == b"":
                        self.stats["before logon: closed by acceptor"] += 1
        except OSError:
            self.stats["before logon: refused"] += 1

    def check_all(self) -> int:
        """Log every slot on again if needed and probe it; return how many answered."""
        alive = 0
        for slot in range(self.slots):
            if not self._conn(slot).probe():
                self.conns[slot].close()  # type: ignore[union-attr]
                if not self._conn(slot).probe():
                    continue
            alive += 1
        return alive

