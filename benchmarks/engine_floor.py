"""What one QuickFIX engine thread can take from Python, and what costs it (a benchmark, not a test).

    python -m benchmarks.engine_floor --orders 200000 [--variant NAME ...]

Floods a bare QuickFIX acceptor (the gateway's own settings and dictionary, no Redis, no gateway
code) with one session's NewOrderSingle and times how fast ``fromApp`` sees them, for variants of
what ``fromApp`` and the rest of the process do. Each variant runs in a process of its own, one
after the other, so they are compared within minutes on the same machine:

- ``count``: fromApp only counts: QuickFIX's parse and validation plus the SWIG callback (the floor).
- ``tostring``: plus ``message.toString()``.
- ``pipe``: plus writing the text to a pipe read by another process (the gateway's design).
- ``ticker``: ``count``, while another Python thread of the process wakes every millisecond.
- ``thread``: the text to a deque, drained by a Python thread that splits it into fields (the shape
  of the gateway's earlier in-process writer, with the lightest possible translation).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

VARIANTS = ("count", "tostring", "pipe", "ticker", "thread")

# The reader of the ``pipe`` variant: like the publisher, it lingers after a read of many records.
_DRAIN = """
import os, sys, time
while True:
    data = os.read(0, 1 << 20)
    if not data:
        break
    if data.count(b"\\x0110=") > 1:
        time.sleep(0.002)
"""


def run_variant(variant: str, orders: int, emit: bool = False) -> dict[str, Any]:
    """Flood a bare acceptor whose fromApp does ``variant``; orders/s and CPU per order."""
    import quickfix as fix

    from benchmarks.fixload import COMP_ID, cpu_seconds, encode_orders, frame
    from services.gateway.sessions import SessionSpec, settings_text
    from shared.fix.dictionary import installed_dictionary
    from shared.fix.engine_thread import keep_thread_state
    from shared.redis_server import free_port

    done = threading.Event()
    stop = threading.Event()
    count = [0]
    texts: deque[str] = deque()
    extra: Callable[[Any], None]
    drain: subprocess.Popen[bytes] | None = None

    if variant in ("count", "ticker"):
        def extra(msg: Any) -> None:
            return None
    elif variant == "tostring":
        def extra(msg: Any) -> None:
            msg.toString()
    elif variant == "pipe":
        drain = subprocess.Popen([sys.executable, "-c", _DRAIN], stdin=subprocess.PIPE)
        assert drain.stdin is not None
        fd = drain.stdin.fileno()

        def extra(msg: Any) -> None:
            os.write(fd, msg.toString().encode())
    elif variant == "thread":
        def extra(msg: Any) -> None:
            texts.append(msg.toString())
    else:
        raise ValueError(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")

    def ticker() -> None:
        while not stop.wait(0.001):
            pass

    def splitter() -> None:
        while not stop.is_set():
            if not texts:
                time.sleep(0.0005)
                continue
            for _ in range(len(texts)):
                dict(item.partition("=")[::2] for item in texts.popleft().split("\x01") if item)

    class Bare(fix.Application):
        def onCreate(self, sid: Any) -> None: ...
        def onLogon(self, sid: Any) -> None: ...
        def onLogout(self, sid: Any) -> None: ...
        def toAdmin(self, msg: Any, sid: Any) -> None: ...
        def fromAdmin(self, msg: Any, sid: Any) -> None: ...
        def toApp(self, msg: Any, sid: Any) -> None: ...

        def fromApp(self, msg: Any, sid: Any) -> None:
            keep_thread_state()  # as the gateway's acceptor does (shared.fix.engine_thread)
            extra(msg)
            count[0] += 1
            if count[0] == orders:
                done.set()

    helper = {"ticker": ticker, "thread": splitter}.get(variant)
    if helper is not None:
        threading.Thread(target=helper, daemon=True).start()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fixlab-floor-") as tmp:
        cfg = Path(tmp) / "floor.cfg"
        spec = SessionSpec(COMP_ID, options={"ResetOnLogon": "Y", "CheckLatency": "N"})
        cfg.write_text(settings_text([spec], port=port, host="", data_dictionary=installed_dictionary()))
        acceptor = fix.SocketAcceptor(Bare(), fix.MemoryStoreFactory(), fix.SessionSettings(str(cfg)))
        acceptor.start()
        try:
            now = datetime.now(UTC).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]
            payload = b"".join(encode_orders(orders, 2, now))
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(frame([(35, "A"), (49, COMP_ID), (56, "FIXLAB"), (34, "1"), (52, now),
                                (98, "0"), (108, "30"), (141, "Y")]))
            sock.recv(4096)
            cpu0, t0 = cpu_seconds(os.getpid()), time.time()
            sock.sendall(payload)
            if not done.wait(600):
                raise RuntimeError(f"only {count[0]} of {orders} arrived")
            cpu1, t1 = cpu_seconds(os.getpid()), time.time()
            sock.close()
            result = {"variant": variant, "orders": orders, "orders_per_s": round(orders / (t1 - t0)),
                      "cpu_us_per_order": round((cpu1 - cpu0) / orders * 1e6, 1)}
            if emit:  # before the teardown, which quickfix 1.16 sometimes ends with a segfault
                print(json.dumps(result), flush=True)
        finally:
            stop.set()
            acceptor.stop()
            if drain is not None:
                assert drain.stdin is not None
                drain.stdin.close()
                drain.wait(10)
    return result


def measure(variants: list[str], orders: int) -> list[dict[str, Any]]:
    """Each variant in a fresh process, in order."""
    out = []
    for variant in variants:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.engine_floor", "--one", variant,
                               "--orders", str(orders)], stdout=subprocess.PIPE, text=True, timeout=900)
        # The figure is printed before the acceptor's teardown: a crash after it does not void it.
        lines = proc.stdout.strip().splitlines()
        if not lines:
            raise RuntimeError(f"engine floor {variant!r} exited with {proc.returncode} and no result")
        out.append(json.loads(lines[-1]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=200_000)
    parser.add_argument("--variant", action="append", choices=VARIANTS,
                        help="run only these (repeatable); default: all, in the order above")
    parser.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)  # a single run, in this process
    args = parser.parse_args(argv)
    if args.one:
        run_variant(args.one, args.orders, emit=True)
        os._exit(0)  # skip teardown of the SWIG-wrapped acceptor (see services/gateway/__main__.py)
    for row in measure(args.variant or list(VARIANTS), args.orders):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
