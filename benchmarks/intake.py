"""Gateway intake benchmark (not a test): one FIX session floods NewOrderSingle into a real gateway.

    python -m benchmarks.intake --orders 1000000 --out intake.json
    python -m benchmarks.intake --translate-only 20000   # Publisher.group alone, fast vs split path

Starts its own redis-server and ``python -m services.gateway`` (no matcher: intake only), logs on
over a plain socket, then writes pre-encoded NewOrderSingle bytes as fast as the socket takes them,
so the client is not the bottleneck. The rate is measured on the bus: from the first to the last
stream entry holding the orders (Redis entry ids are millisecond timestamps of the XADD).
The session is one of the user-file kind (``INTAKE``, CheckLatency=N) because the pre-encoded
SendingTime (52) of the last orders can be older than QuickFIX's 120 s latency check on a slow run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from benchmarks import engine_floor
from benchmarks.fixload import COMP_ID, children, cpu_seconds, encode_orders, frame, thread_cpu
from services.gateway.inbound import Inbound
from services.gateway.intake import Publisher
from shared import machine, streams
from shared.config import parse_instruments
from shared.redis_server import RedisServer, free_port
from shared.schema import decode_batch


def run(orders: int, out: Path | None, profile: Path | None, session_settings: str = "",
        firms: str = "") -> dict[str, Any]:
    """``session_settings``: more lines for the session's section (risk limits, say); ``firms``:
    [FIRM] sections for the sessions file (benchmarks/risk.py)."""
    with tempfile.TemporaryDirectory(prefix="fixlab-intake-") as tmp:
        base = Path(tmp)
        server = RedisServer(base / "redis").start()
        port = free_port()
        sessions = base / "intake.cfg"
        sessions.write_text(f"{firms}[SESSION]\nTargetCompID={COMP_ID}\nResetOnLogon=Y\nCheckLatency=N\n"
                            + session_settings)
        env = {**os.environ, "REDIS_URL": server.url, "FIXLAB_FIX_PORT": str(port), "FIXLAB_LABS": "0",
               "FIXLAB_GATEWAY_ID": "intake", "FIXLAB_RUN_DIR": str(base / "run"),
               "FIXLAB_FIX_SESSIONS_FILE": str(sessions), "FIXLAB_GATEWAY_QUEUE": str(orders + 1000),
               "FIXLAB_STREAM_MAXLEN": str(max(orders, 1000))}
        log_path = base / "gateway.log"
        with log_path.open("wb") as log:
            gw = subprocess.Popen([sys.executable, "-m", "services.gateway"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        spy: subprocess.Popen[bytes] | None = None
        try:
            deadline = time.monotonic() + 30
            while True:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if gw.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"gateway did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.05)
            now = datetime.now(UTC).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]
            print(f"intake: encoding {orders:,} orders", file=sys.stderr)
            payload = encode_orders(orders, 2, now)
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(frame([(35, "A"), (49, COMP_ID), (56, "FIXLAB"), (34, "1"), (52, now),
                                (98, "0"), (108, "30"), (141, "Y")]))
            reply = sock.recv(4096)
            if b"35=A" not in reply:
                raise RuntimeError(f"logon refused: {reply!r}")
            if profile is not None:
                fmt = "speedscope" if profile.suffix == ".json" else "raw"
                spy = subprocess.Popen(["py-spy", "record", "--pid", str(gw.pid), "--output", str(profile),
                                        "--format", fmt, "--rate", "200", "--nonblocking", "--gil"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1.0)
            # What the gateway published of its own before the flood (at start it ends the sessions a
            # previous run may have left open, and hands the matchers the day's end): not orders.
            r = redis.Redis.from_url(server.url)
            key = streams.health_key("gateway", "intake")
            stream = streams.orders_stream("0")
            # Its health report (every 2 s) once nothing of its own waits for the bus: then the
            # published count holds all of it (the count and the queue come from one report).
            while r.hget(key, "queue_depth") != b"0":
                if gw.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"gateway reported no health:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.05)
            own = int(r.hget(key, "published") or 0)
            before: Any = r.xrevrange(stream, count=1)
            after_id = b"(" + before[0][0] if before else b"-"
            cpu0 = cpu_seconds(gw.pid)
            kids0 = {c: cpu_seconds(c) for c in children(gw.pid)}
            print("intake: flooding", file=sys.stderr)
            t_send0 = time.time()
            chunk = 2000
            for i in range(0, orders, chunk):
                sock.sendall(b"".join(payload[i:i + chunk]))
            t_send1 = time.time()
            deadline = time.monotonic() + 600
            published = 0
            answered = 0  # published, or refused by the gateway (busy, invalid): every order accounted for
            while answered < orders:
                if gw.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text()[-3000:]
                    raise RuntimeError(f"gateway stopped or stalled at {published}:\n{tail}")
                time.sleep(0.2)
                counts: Any = r.hmget(key, ["published", "busy", "refused"])
                published, busy, refused = (int(v) if v else 0 for v in counts)
                published -= own
                answered = published + busy + refused
            cpu1 = cpu_seconds(gw.pid)
            kids = {c: cpu_seconds(c) - kids0.get(c, 0.0) for c in children(gw.pid)}
            threads = {k: round(v, 2) for k, v in sorted(thread_cpu(gw.pid).items(), key=lambda kv: -kv[1])
                       if v >= 0.05}
            health_raw: Any = r.hgetall(key)
            health = {k.decode(): v.decode() for k, v in health_raw.items()}
            first: Any = r.xrange(stream, min=after_id, count=1)
            last: Any = r.xrevrange(stream, count=1)
            entries: int = r.xlen(stream)
            first_id, first_fields = first[0]
            last_id, last_fields = last[0]
            first_ms = int(first_id.split(b"-")[0])
            last_ms = int(last_id.split(b"-")[0])
            first_batch = decode_batch(first_fields[streams.BATCH_FIELD])
            last_batch = decode_batch(last_fields[streams.BATCH_FIELD])
            sock.close()
        finally:
            gw.terminate()
            try:
                gw.wait(15)
            except subprocess.TimeoutExpired:
                gw.kill()
                gw.wait()
            if spy is not None:
                spy.wait(30)
            server.stop()
    span_s = (last_ms - first_ms) / 1000
    # Orders in the first entry were published at its time stamp: count the rest over the span.
    # None: every order landed within one millisecond of the first (too few to measure a rate).
    rate = (published - len(first_batch)) / span_s if span_s > 0 else None
    result = {
        "benchmark": "gateway intake: one FIX session floods NewOrderSingle; first to last order on the bus",
        "command": "python -m benchmarks.intake " + " ".join(sys.argv[1:]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        **machine.describe(),
        "orders": orders,
        "published": published,
        "first_clordid": getattr(first_batch[0], "clordid", None),
        "last_clordid": getattr(last_batch[-1], "clordid", None),
        "stream_entries": entries,
        "orders_per_entry": round(orders / entries, 1),
        "bus_span_s": span_s,
        "orders_per_s": round(rate) if rate is not None else None,
        "client_send_s": round(t_send1 - t_send0, 3),
        "gateway_cpu_s": round(cpu1 - cpu0, 2),
        "gateway_cpu_us_per_order": round((cpu1 - cpu0) / orders * 1e6, 1),
        "publisher_cpu_s": round(sum(kids.values()), 2),
        "publisher_cpu_us_per_order": round(sum(kids.values()) / orders * 1e6, 1),
        "gateway_health": health,
        "gateway_thread_cpu_s": threads,
        "target_orders_per_s": 50_000,
        "anchor": "QuickFIX C++ 197,700 orders/s on a Xeon (seed 001)",
        "profile": str(profile) if profile else None,
    }
    if out is not None:
        out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def translate_only(orders: int, rounds: int = 15) -> dict[str, Any]:
    """The publisher's translate + group per order, in this process, no Redis or QuickFIX: the fast
    path (Inbound.new_order, shared.fix.reader) against split_fields + command (``fast_path``
    False), interleaved round by round; the orders as this bench sends them (no TimeInForce) and
    with 59=0 (as services/bench and tools/example_client send them). Best round, ns per order."""
    instruments = parse_instruments({})
    texts = [raw.decode() for raw in encode_orders(orders, 2, "20260101-00:00:00.000")]
    batches = {"no 59": [(t, i) for i, t in enumerate(texts)],
               "59=0": [(t.replace("\x0160=", "\x0159=0\x0160=", 1), i) for i, t in enumerate(texts)]}
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, batch in batches.items():
            for fast in (False, True):
                publisher = Publisher(_NoWriter(), Inbound(instruments, "intake"), instruments, orders, "")
                publisher.fast_path = fast
                start = time.perf_counter_ns()
                _, count = publisher.group(batch)
                ns = (time.perf_counter_ns() - start) / orders
                assert count == orders and publisher.errors == publisher.refused == 0
                key = f"{name}, {'reader' if fast else 'split_fields'}"
                best[key] = min(best.get(key, ns), ns)
    result: dict[str, Any] = {"orders": orders, "rounds": rounds,
                              "ns_per_order": {k: round(v) for k, v in best.items()}}
    for name in batches:
        result[f"ratio {name}"] = round(best[f"{name}, reader"] / best[f"{name}, split_fields"], 3)
    return result


class _NoWriter:
    """Publisher.group never writes: translate_only calls nothing else."""

    def xadd_batches(self, entries: Sequence[tuple[str, bytes]], maxlen: int,
                     done: tuple[str, int] | None = None) -> list[int]:
        raise NotImplementedError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    parser.add_argument("--profile", type=Path, default=None,
                        help="py-spy profile of the gateway, GIL holders only (.json: speedscope, else raw)")
    parser.add_argument("--floor", type=int, default=200_000,
                        help="also flood bare QuickFIX acceptors (benchmarks.engine_floor, every "
                             "variant) with this many orders each (0: skip)")
    parser.add_argument("--translate-only", type=int, default=0, metavar="ORDERS",
                        help="only time the publisher's translate + group of this many orders, in "
                             "process, fast path against split_fields (no gateway, no Redis)")
    args = parser.parse_args(argv)
    if args.translate_only:
        print(json.dumps(translate_only(args.translate_only)))
        return 0
    if args.orders < 1000:
        parser.error("--orders must be at least 1000")
    result = run(args.orders, None, args.profile)
    if args.floor:
        print(f"intake: engine floor, {args.floor:,} orders into bare QuickFIX acceptors", file=sys.stderr)
        rows = engine_floor.measure(list(engine_floor.VARIANTS), args.floor)
        count = next(r for r in rows if r["variant"] == "count")
        result.update({"floor_orders": args.floor, "floor_orders_per_s": count["orders_per_s"],
                       "floor_cpu_us_per_order": count["cpu_us_per_order"],
                       "engine_floor": {r["variant"]: {k: r[k] for k in ("orders_per_s", "cpu_us_per_order")}
                                        for r in rows},
                       "engine_floor_command": "python -m benchmarks.engine_floor --orders "
                                               f"{args.floor}"})
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    keys = ("orders", "orders_per_s", "bus_span_s", "stream_entries", "gateway_cpu_us_per_order",
            "publisher_cpu_us_per_order",
            "floor_orders_per_s", "floor_cpu_us_per_order")
    print(json.dumps({k: result[k] for k in keys if k in result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
