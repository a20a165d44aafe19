"""``python -m benchmarks.lab``: what the tap and idle lab sessions cost on this machine.

1. Tap round trip: a FIX message to a loopback echo server and back, direct and through a tap
   (both directions framed and recorded); percentiles over every message.
2. Lab sessions in a real gateway process (its own redis-server, no matcher): time from LabStart to
   logged_on for N sessions, then the gateway's CPU while they sit idle (heartbeats only).
Timings on a shared 2-core machine are rough: run it when the machine is quiet.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

from shared import streams
from shared.bus import publish
from shared.clock import now_ns
from shared.fix.tap import Tap, TapLoop
from shared.redis_server import RedisServer, free_port
from shared.schema import LabStart, LabState, decode_batch

SOH = b"\x01"


def _fix(seq: int) -> bytes:
    body = (b"35=D\x0134=%d\x0149=LAB001\x0152=20260101-00:00:00.000\x0156=FIXLAB\x0111=o%d\x01"
            b"55=ACORN.LAB\x0154=1\x0138=5\x0140=2\x0144=100.00\x0159=0\x0160=20260101-00:00:00.000\x01"
            % (seq, seq))
    head = b"8=FIX.4.4\x019=%d\x01" % len(body)
    return head + body + b"10=%03d\x01" % (sum(head + body) % 256)


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while chunk := conn.recv(65536):
                conn.sendall(chunk)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def _round_trips(port: int, n: int) -> list[float]:
    out = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(n):
            msg = _fix(i + 1)
            t0 = time.perf_counter()
            sock.sendall(msg)
            got = b""
            while len(got) < len(msg):
                got += sock.recv(65536)
            out.append(time.perf_counter() - t0)
    return out


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def bench_tap(n: int) -> None:
    server, port = _echo_server()
    direct = _round_trips(port, n)
    server.close()
    server, port = _echo_server()
    loop = TapLoop().start()
    records = [0]

    def on_record(*_args: object) -> None:
        records[0] += 1

    tap = Tap(loop, "127.0.0.1", port, on_record, lambda reason: None)
    tapped = _round_trips(tap.open(), n)
    tap.close()
    loop.stop()
    server.close()
    print(f"tap round trip, {n} messages of {len(_fix(1))} bytes (loopback echo, one in flight):")
    for name, values in (("direct", direct), ("through the tap", tapped)):
        print(f"  {name:16} p50 {_pct(values, 50) * 1e6:7.0f} us   p90 {_pct(values, 90) * 1e6:7.0f} us"
              f"   p99 {_pct(values, 99) * 1e6:7.0f} us")
    print(f"  tap records: {records[0]} (both directions)")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_sessions(n: int, idle_s: float) -> None:
    with tempfile.TemporaryDirectory(prefix="fixlab-labbench-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        fix_port = free_port()
        env = {**os.environ, "REDIS_URL": server.url, "FIXLAB_FIX_PORT": str(fix_port),
               "FIXLAB_GATEWAY_ID": "labbench", "FIXLAB_LABS": "1", "FIXLAB_LAB_MAX_SESSIONS": str(n),
               "FIXLAB_RUN_DIR": str(Path(tmp) / "run")}
        log = (Path(tmp) / "gateway.log").open("wb")
        gw = subprocess.Popen([sys.executable, "-m", "services.gateway"], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
        r = redis.Redis.from_url(server.url)
        try:
            deadline = time.monotonic() + 60
            while not r.keys(streams.health_key("gateway", "*")):
                if time.monotonic() > deadline or gw.poll() is not None:
                    raise SystemExit("the gateway did not start")
                time.sleep(0.1)
            time.sleep(1.0)  # let the lab consumer create its group
            t0 = time.perf_counter()
            labs = [f"bench-{i}" for i in range(n)]
            for lab in labs:
                publish(r, streams.LAB_START_STREAM, [LabStart(lab, "bench", now_ns())], 10_000)
            pending = set(labs)
            while pending:
                for lab in list(pending):
                    rows: list = r.xrange(streams.lab_stream(lab))  # type: ignore[assignment]
                    msgs = [m for _, f in rows for m in decode_batch(f[streams.BATCH_FIELD])]
                    if any(isinstance(m, LabState) and m.status == "logged_on" for m in msgs):
                        pending.discard(lab)
                if time.perf_counter() - t0 > 120:
                    raise SystemExit(f"{len(pending)} sessions never logged on")
                time.sleep(0.02)
            elapsed = time.perf_counter() - t0
            cpu0 = _cpu_s(gw.pid)
            time.sleep(idle_s)
            cpu = _cpu_s(gw.pid) - cpu0
            print(f"{n} lab sessions in one gateway: all logged on {elapsed:.2f} s after their LabStarts")
            print(f"  idle (heartbeats every 6 s, both ends, recorded): gateway CPU "
                  f"{cpu / idle_s * 100:.1f}% of one core over {idle_s:.0f} s")
        finally:
            gw.terminate()
            gw.wait(30)
            log.close()
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args()
    bench_tap(args.messages)
    bench_sessions(args.sessions, args.idle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
