"""A runner for QuickFIX's own session acceptance definitions (``*.def``), against any acceptor.

    python -m tools.conformance DIR --port 9878 [--only NAME ...]

``SUITES`` names the three the exchange plays (FIX 4.2, FIX 4.4, FIX 5.0 SP2 over FIXT.1.1): where
each lies under ``../shared/conformance`` and the CompIDs its files use.

The definition format (QuickFIX test/definitions/server): ``#`` comment; ``iCONNECT`` / ``i2,CONNECT``
open connection 1 (or 2); ``iDISCONNECT`` closes ours; ``I<msg>`` sends; ``E<msg>`` expects the next
message; ``eDISCONNECT`` expects the peer to close. ``<TIME>``, ``<TIME+N>``, ``<TIME-N>`` are UTC
timestamps. A message to send without 9= or 10= gets them computed; one written in the file is sent
as is. Expected messages must match field by field in order; 10, 52, 60, 122 and 42 loosely.
The session-level definitions are those whose expectations are all admin messages (the other 15 of
each suite expect QuickFIX's 'at' echo application, which an exchange is not): 44 of FIX 4.4's 59,
43 of FIX 4.2's 58, 45 of FIX 5.0 SP2's 60.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import select
import socket
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

SOH = b"\x01"
LOOSE = {b"10", b"52", b"60", b"122", b"42"}
ADMIN_TYPES = {b"0", b"1", b"2", b"3", b"4", b"5", b"A"}
_TIME = re.compile(rb"<TIME([+-]\d+)?>")
_STEP = re.compile(rb"^([iIeE])(?:(\d+),)?(.*)$", re.S)


class StepFailed(AssertionError):
    """The acceptor did something the definition does not expect."""


@dataclass(frozen=True, slots=True)
class Step:
    kind: str  # "connect", "disconnect", "send", "expect", "expect_disconnect"
    conn: int
    data: bytes = b""
    line: int = 0


@dataclass
class Result:
    name: str
    passed: bool
    detail: str = ""
    seconds: float = 0.0
    steps_done: int = 0
    steps: int = 0


def parse_definition(raw: bytes) -> list[Step]:
    """The steps of one ``.def`` file."""
    steps = []
    for n, line in enumerate(raw.split(b"\n"), 1):
        line = line.rstrip(b"\r")
        if not line or line.startswith(b"#"):
            continue
        m = _STEP.match(line)
        if m is None:
            raise ValueError(f"line {n}: not a step: {line[:60]!r}")
        code, conn_raw, rest = m.group(1), m.group(2), m.group(3)
        conn = int(conn_raw) if conn_raw else 1
        if code == b"i" and rest.startswith(b"CONNECT"):
            steps.append(Step("connect", conn, line=n))
        elif code == b"i" and rest.startswith(b"DISCONNECT"):
            steps.append(Step("disconnect", conn, line=n))
        elif code == b"e" and rest.startswith(b"DISCONNECT"):
            steps.append(Step("expect_disconnect", conn, line=n))
        elif code == b"I":
            steps.append(Step("send", conn, rest, n))
        elif code == b"E":
            steps.append(Step("expect", conn, rest, n))
        else:
            raise ValueError(f"line {n}: unknown step {line[:60]!r}")
    return steps


def session_level(steps: Iterable[Step]) -> bool:
    """True when every expected message is an admin message (no echo application needed)."""
    for step in steps:
        if step.kind == "expect":
            fields = dict(f.split(b"=", 1) for f in step.data.split(SOH) if b"=" in f)
            if fields.get(b"35") not in ADMIN_TYPES:
                return False
    return True


def fix_time(offset_s: int = 0, now: datetime | None = None) -> bytes:
    stamp = (now or datetime.now(UTC)) + timedelta(seconds=offset_s)
    return stamp.strftime("%Y%m%d-%H:%M:%S.%f")[:-3].encode()


def substitute(data: bytes) -> bytes:
    """Fill every <TIME> of one message from one clock reading: read twice, 122 OrigSendingTime could
    land a millisecond after 52 SendingTime, which the engine rightly rejects (373=10)."""
    now = datetime.now(UTC)
    return _TIME.sub(lambda m: fix_time(int(m.group(1) or 0), now), data)


def build(data: bytes) -> bytes:
    """The bytes to send for an ``I`` line: BodyLength and CheckSum computed where not written."""
    fields = [f for f in substitute(data).split(SOH) if f]
    tags = [f.split(b"=", 1)[0] for f in fields]
    if b"9" not in tags:
        body = [f for f, t in zip(fields, tags, strict=True) if t not in (b"8", b"10")]
        first = [f for f, t in zip(fields, tags, strict=True) if t == b"8"]
        body_bytes = b"".join(f + SOH for f in body)
        fields = [*first, b"9=%d" % len(body_bytes), *body]
        tags = [f.split(b"=", 1)[0] for f in fields]
    msg = b"".join(f + SOH for f in fields if not f.startswith(b"10="))
    if b"10" in tags:
        return msg + next(f for f in fields if f.startswith(b"10=")) + SOH
    return msg + b"10=%03d" % (sum(msg) % 256) + SOH


def compare(expected: bytes, got: bytes) -> str | None:
    """None when ``got`` matches the expectation, else what differs."""
    want = [f.split(b"=", 1) for f in expected.split(SOH) if f]
    have = [f.split(b"=", 1) for f in got.split(SOH) if f]
    want_tags = {pair[0] for pair in want}
    # An expectation without 9= or 10= leaves them to be computed: nothing to compare.
    have = [pair for pair in have if pair[0] not in (b"9", b"10") or pair[0] in want_tags]
    for i, pair in enumerate(want):
        if i >= len(have):
            return f"missing {pair[0].decode()}= (got {_show(got)})"
        tag, value = pair if len(pair) == 2 else (pair[0], b"")
        htag, hvalue = have[i] if len(have[i]) == 2 else (have[i][0], b"")
        if tag != htag:
            return f"field {i + 1}: expected tag {tag.decode()}, got {htag.decode()} in {_show(got)}"
        if tag not in LOOSE and value != hvalue:
            return (f"{tag.decode()}={hvalue.decode('latin-1')} where {value.decode('latin-1')} was expected "
                    f"in {_show(got)}")
    if len(have) > len(want):
        return f"extra fields after the expected ones: {_show(got)}"
    return None


def _show(raw: bytes) -> str:
    return raw.replace(SOH, b"|").decode("latin-1")


class Connection:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.buf = b""
        self.closed = False

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            self.closed = True

    def read(self, timeout_s: float) -> bytes | None:
        """The next whole message; None when the peer closed; raises TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while True:
            start = self.buf.find(b"8=")
            if start > 0:
                self.buf = self.buf[start:]
            end = self.buf.find(SOH + b"10=")
            if end >= 0:
                stop = self.buf.find(SOH, end + 1)
                if stop >= 0:
                    msg, self.buf = self.buf[:stop + 1], self.buf[stop + 1:]
                    return msg
            if self.closed:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.sock], [], [], left)
            if ready:
                try:
                    chunk = self.sock.recv(65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    self.closed = True
                else:
                    self.buf += chunk

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        self.closed = True


@dataclass
class Runner:
    """Plays definitions against an acceptor at host:port."""

    host: str
    port: int
    timeout_s: float = 20.0
    results: list[Result] = field(default_factory=list)

    def run_file(self, path: Path) -> Result:
        steps = parse_definition(path.read_bytes())
        started = time.monotonic()
        conns: dict[int, Connection] = {}
        done = 0
        try:
            for step in steps:
                self._step(step, conns)
                done += 1
            result = Result(path.stem, True, "", steps=len(steps), steps_done=done)
        except (StepFailed, OSError) as exc:
            result = Result(path.stem, False, f"step {done + 1} (line {steps[done].line}): {exc}",
                            steps=len(steps), steps_done=done)
        finally:
            for conn in conns.values():
                conn.close()
        result.seconds = round(time.monotonic() - started, 2)
        self.results.append(result)
        return result

    def _step(self, step: Step, conns: dict[int, Connection]) -> None:
        if step.kind == "connect":
            old = conns.pop(step.conn, None)
            if old is not None:
                old.close()
            conns[step.conn] = Connection(self.host, self.port)
            return
        conn = conns.get(step.conn)
        if conn is None:
            raise StepFailed(f"connection {step.conn} was never opened")
        if step.kind == "disconnect":
            conn.close()
        elif step.kind == "send":
            conn.send(build(step.data))
        elif step.kind == "expect":
            try:
                got = conn.read(self.timeout_s)
            except TimeoutError:
                raise StepFailed(f"nothing arrived in {self.timeout_s}s; expected "
                                 f"{_show(step.data)}") from None
            if got is None:
                raise StepFailed(f"the acceptor closed the connection; expected {_show(step.data)}")
            problem = compare(step.data, got)
            if problem is not None:
                raise StepFailed(problem)
        elif step.kind == "expect_disconnect":
            try:
                got = conn.read(self.timeout_s)
            except TimeoutError:
                raise StepFailed(f"the acceptor did not disconnect within {self.timeout_s}s") from None
            if got is not None:
                raise StepFailed(f"expected a disconnect, got {_show(got)}")


@dataclass(frozen=True, slots=True)
class Suite:
    """One version's definitions: their folder under ``conformance/`` and the CompIDs they use."""

    version: str  # "4.2", "4.4", "5.0SP2" (shared.fix.versions)
    folder: str
    begin_string: str
    client: str  # the definitions' SenderCompID
    acceptor: str = "ISLD"
    session_level: int = 0  # how many of its definitions need no echo application


SUITES: dict[str, Suite] = {
    # FIX 4.4 at tag v1.16.0 (the engine PyPI installs): client TW (TW44 in QuickFIX's HEAD).
    "4.4": Suite("4.4", "quickfix-at-fix44/_v1.16.0_TW", "FIX.4.4", "TW", session_level=44),
    "4.2": Suite("4.2", "quickfix-at-fix42", "FIX.4.2", "TW42", session_level=43),
    "5.0SP2": Suite("5.0SP2", "quickfix-at-fix50sp2", "FIXT.1.1", "TW50SP2", session_level=45),
}


def session_level_files(folder: Path) -> list[Path]:
    """The definitions in ``folder`` that need no echo application."""
    return sorted(p for p in folder.glob("*.def") if session_level(parse_definition(p.read_bytes())))


def acceptor_sessions_file(client: str = "TW", acceptor: str = "ISLD", begin_string: str = "FIX.4.4") -> str:
    """The user-file section that makes the gateway accept the suite's CompIDs."""
    return (f"[SESSION]\nBeginString={begin_string}\nSenderCompID={acceptor}\nTargetCompID={client}\n"
            "ResetOnLogon=Y\nResetOnLogout=Y\nResetOnDisconnect=Y\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Play QuickFIX session acceptance definitions")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--only", nargs="*", default=None, help="definition names (without .def)")
    args = parser.parse_args(argv)
    files = session_level_files(args.folder)
    if args.only:
        files = [f for f in files if f.stem in set(args.only)]
    runner = Runner(args.host, args.port)
    for path in files:
        result = runner.run_file(path)
        print(f"{'PASS' if result.passed else 'FAIL'} {result.name} ({result.seconds}s) {result.detail}",
              flush=True)
    passed = sum(r.passed for r in runner.results)
    print(f"{passed}/{len(runner.results)} passed")
    return 0 if passed == len(runner.results) else 1


if __name__ == "__main__":
    sys.exit(main())
