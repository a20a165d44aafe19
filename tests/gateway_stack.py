"""Start the exchange as real processes for a test, and talk FIX to it over a plain socket.

    from tests.gateway_stack import gateway_stack, FixClient

    with gateway_stack(redis_url) as stack:          # matcher + gateway (redis_url: a running Redis)
        with FixClient(stack.fix_port, "CLIENT01") as c:
            c.send("D", {11: "o1", 55: "ACORN.LAB", 54: 1, 38: 10, 40: 2, 44: "100.00"})
            er = c.expect("8", lambda m: m[11] == "o1")   # dict tag -> value

``gateway_stack`` yields a ``Stack`` (redis_url, fix_port, gateway_id, gateway process); it stops
every process it started on exit (SIGTERM, then SIGKILL) and prints their logs when the body failed.
Pass ``redis_url=None`` to get a private redis-server too; ``matcher=False`` for the gateway alone.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from shared.logs import STACKS_SIGNAL
from shared.redis_server import RedisServer, free_port
from shared.supervisor import STACKS_WAIT_S

ROOT = Path(__file__).resolve().parent.parent
SOH = b"\x01"


@dataclass
class Stack:
    redis_url: str
    fix_port: int
    gateway_id: str
    gateway: subprocess.Popen[bytes]
    log_dir: Path


def _spawn(argv: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``; a service's log then shows where it hung (its
    threads' stacks, written on ``STACKS_SIGNAL`` as the runner asks for them)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(STACKS_SIGNAL)
            time.sleep(STACKS_WAIT_S)
            proc.kill()
            proc.wait()


def wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 30.0) -> None:
    """Wait until something accepts on ``port``; fail with the process's log if it died."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {port} after {timeout_s}s:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


PORT_TAKEN = "Address already in use"


def start_gateway(env: Mapping[str, str], log: Path, attempts: int = 3,
                  timeout_s: float = 30.0) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``python -m services.gateway`` on a free FIX port (FIXLAB_FIX_PORT when ``env`` has
    one) and wait until it says it is ready on that port; return it and the port.

    A port free_port() found can be taken before the gateway binds it (another worker's server, or
    an outgoing connection's ephemeral port): the gateway then exits "Address already in use", and
    it is started again on another port. Readiness is the gateway's own line, not something
    accepting on the port: that something could be the other process that took it (a stressed run
    went on against such a port and every logon timed out)."""
    fixed = env.get("FIXLAB_FIX_PORT")
    for attempt in range(1 if fixed else attempts):
        port = int(fixed) if fixed else free_port()
        start = log.stat().st_size if log.exists() else 0
        proc = _spawn([sys.executable, "-m", "services.gateway"], {**env, "FIXLAB_FIX_PORT": str(port)}, log)
        ready = f"ready on port {port}"
        deadline = time.monotonic() + timeout_s
        while True:
            text = log.read_text(errors="replace")[start:]
            if ready in text:
                return proc, port
            if proc.poll() is not None:
                if PORT_TAKEN in text and attempt + 1 < attempts and not fixed:
                    break  # taken before the gateway bound it: another port
                raise RuntimeError(f"gateway exited with {proc.returncode}:\n{text[-3000:]}")
            if time.monotonic() > deadline:
                stop_process(proc)
                raise RuntimeError(f"gateway not ready on {port} after {timeout_s}s:\n{text[-3000:]}")
            time.sleep(0.05)
    raise AssertionError("unreachable")


def matcher_available() -> bool:
    return importlib.util.find_spec("services.matcher.__main__") is not None


@contextlib.contextmanager
def gateway_stack(redis_url: str | None, *, matcher: bool = True, env: Mapping[str, str] | None = None,
                  gateway_id: str = "gwtest", labs: bool = False) -> Iterator[Stack]:
    """Run (redis-server,) matcher and gateway as processes; yield where to reach them."""
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="fixlab-stack-") as tmp:
        log_dir = Path(tmp)
        if redis_url is None:
            server = RedisServer(log_dir / "redis").start()
            stack.callback(server.stop)
            redis_url = server.url
        # The FIX port is chosen as the gateway starts (start_gateway), unless ``env`` names one.
        full_env = {**{k: v for k, v in os.environ.items() if k != "FIXLAB_FIX_PORT"}, "REDIS_URL": redis_url,
                    "FIXLAB_GATEWAY_ID": gateway_id, "FIXLAB_LABS": "1" if labs else "0",
                    "FIXLAB_RUN_DIR": str(log_dir / "run"), "PYTHONUNBUFFERED": "1",
                    **(env or {})}
        procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []

        def stop_all() -> None:
            for _name, proc, _log in reversed(procs):
                stop_process(proc)

        stack.callback(stop_all)
        if matcher:
            if not matcher_available():
                raise RuntimeError("services.matcher is not in this checkout")
            mlog = log_dir / "matcher.log"
            argv = [sys.executable, "-m", "services.matcher"]
            procs.append(("matcher", _spawn(argv, full_env, mlog), mlog))
        glog = log_dir / "gateway.log"
        gw, fix_port = start_gateway(full_env, glog)
        procs.append(("gateway", gw, glog))
        try:
            yield Stack(redis_url, fix_port, gateway_id, gw, log_dir)
        except BaseException:
            for name, _proc, log in procs:
                sys.stderr.write(f"----- {name} log -----\n{log.read_text()[-6000:]}\n")
            raise


# --------------------------------------------------------------------------- a plain-socket FIX client

def fix_now() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]


def frame(fields: list[tuple[int, object]], begin: str = "FIX.4.4") -> bytes:
    """A whole FIX message with a correct BodyLength and CheckSum."""
    body = b"".join(f"{t}={v}".encode() + SOH for t, v in fields)
    head = f"8={begin}".encode() + SOH + f"9={len(body)}".encode() + SOH
    total = head + body
    return total + f"10={sum(total) % 256:03d}".encode() + SOH


def parse(raw: bytes) -> dict[int, str]:
    out: dict[int, str] = {}
    for item in raw.split(SOH):
        if item:
            tag, _, value = item.partition(b"=")
            out[int(tag)] = value.decode("latin-1")
    return out


class FixClient:
    """A minimal FIX 4.4 initiator on a socket: enough to log on, send orders and read replies."""

    def __init__(self, port: int, comp_id: str, *, target: str = "FIXLAB", heartbeat_s: int = 30,
                 reset: bool = True, logon: bool = True, host: str = "127.0.0.1", begin: str = "FIX.4.4",
                 logon_extra: list[tuple[int, object]] | None = None, source: str | None = None) -> None:
        """``begin``: the session's BeginString; ``logon_extra``: more Logon fields (a FIXT.1.1
        session's DefaultApplVerID, 1137=9, say); ``source``: the local address the socket comes
        from (127.0.0.2: "another machine" to the gateway's address rules)."""
        self.comp_id = comp_id
        self.target = target
        self.begin = begin
        self.seq = 1
        self.sock = socket.create_connection((host, port), timeout=10,
                                             source_address=None if source is None else (source, 0))
        self.buf = b""
        self.received: list[dict[int, str]] = []
        if logon:
            extra: list[tuple[int, object]] = [(98, 0), (108, heartbeat_s)]
            if reset:
                extra.append((141, "Y"))
            self.send("A", extra + list(logon_extra or []))
            self.expect("A")

    def __enter__(self) -> FixClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def message(self, msg_type: str, fields: Mapping[int, object] | list[tuple[int, object]],
                seq: int | None = None, begin: str | None = None) -> bytes:
        items = list(fields.items()) if isinstance(fields, Mapping) else list(fields)
        header: list[tuple[int, object]] = [(35, msg_type), (49, self.comp_id), (56, self.target),
                                            (34, self.seq if seq is None else seq), (52, fix_now())]
        return frame(header + items, begin or self.begin)

    def send(self, msg_type: str, fields: Mapping[int, object] | list[tuple[int, object]]) -> None:
        self.sock.sendall(self.message(msg_type, fields))
        self.seq += 1

    def send_raw(self, data: bytes, *, counts: bool = False) -> None:
        self.sock.sendall(data)
        if counts:
            self.seq += 1

    def read_message(self, timeout_s: float = 10.0) -> dict[int, str] | None:
        """The next whole message, or None when the peer closed the connection."""
        deadline = time.monotonic() + timeout_s
        while True:
            end = self.buf.find(SOH + b"10=")
            if end >= 0:
                stop = self.buf.find(SOH, end + 1)
                if stop >= 0:
                    raw, self.buf = self.buf[:stop + 1], self.buf[stop + 1:]
                    msg = parse(raw)
                    self.received.append(msg)
                    if msg.get(35) == "1":  # answer TestRequests so the session stays up
                        self.send("0", [(112, msg.get(112, ""))])
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.comp_id}: no whole message in {timeout_s}s "
                                   f"(have {self.buf[:200]!r})")
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                continue
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, OSError):
                chunk = b""
            if not chunk:
                return None
            self.buf += chunk

    def expect(self, msg_type: str, where: Callable[[dict[int, str]], bool] | None = None,
               timeout_s: float = 10.0) -> dict[int, str]:
        """Read until a message of ``msg_type`` (matching ``where``) arrives; others are kept."""
        deadline = time.monotonic() + timeout_s
        while True:
            msg = self.read_message(max(0.01, deadline - time.monotonic()))
            if msg is None:
                raise ConnectionError(f"{self.comp_id}: closed while waiting for 35={msg_type}; "
                                      f"got {self.received[-3:]}")
            if msg.get(35) == msg_type and (where is None or where(msg)):
                return msg

    def closed(self, timeout_s: float = 10.0) -> bool:
        """True once the peer closed the connection (messages before that are kept)."""
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if self.read_message(max(0.01, deadline - time.monotonic())) is None:
                    return True
        except TimeoutError:
            return False

    def logout(self) -> None:
        self.send("5", [])
        with contextlib.suppress(TimeoutError, ConnectionError):
            self.expect("5", timeout_s=5)
        self.close()


def order(clordid: str, side: int, qty: int, price: str, symbol: str = "ACORN.LAB",
          tif: int | None = None) -> list[tuple[int, object]]:
    """The body of a NewOrderSingle (35=D) limit order."""
    fields: list[tuple[int, object]] = [(11, clordid), (55, symbol), (54, side), (60, fix_now()),
                                        (38, qty), (40, 2), (44, price)]
    if tif is not None:
        fields.append((59, tif))
    return fields
