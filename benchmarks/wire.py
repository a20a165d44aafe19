"""``python -m benchmarks.wire [--browser]``: how fast the web side names and forwards a busy wire.

1. The wire parser: microseconds per message (Logon, NewOrderSingle, ExecutionReport).
2. Through the web service: a private redis-server and ``python -m services.web`` on free ports; a
   WebSocket page logs on, this script plays the gateway and publishes N wire records on the lab's
   stream; it reports records per second until the page has all N, parsed.
3. With ``--browser``: the same into the real page in headless chromium, until the DOM holds N
   messages.
Timings on a shared 2-core machine are rough. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import redis
from websockets.sync.client import connect

from shared import streams
from shared.bus import publish
from shared.fix import dictionary
from shared.fix.wire import parse
from shared.redis_server import RedisServer, free_port
from shared.schema import LabStart, LabState, WireRecord, decode_batch


def fix(body: str) -> bytes:
    b = body.replace("|", "\x01").encode()
    head = b"8=FIX.4.4\x019=" + str(len(b)).encode() + b"\x01"
    return head + b + b"10=%03d\x01" % (sum(head + b) % 256)


SAMPLES = [
    fix("35=A|34=1|49=LAB001|52=20260101-12:00:00.000|56=FIXLAB|98=0|108=6|141=Y|"),
    fix("35=D|34=2|49=LAB001|52=20260101-12:00:01.000|56=FIXLAB|11=abc-1|38=10|40=2|44=100.10|54=1|"
        "55=ACORN.LAB|59=0|60=20260101-12:00:01.000|"),
    fix("35=8|34=3|49=FIXLAB|52=20260101-12:00:01.002|56=LAB001|6=100.1|11=abc-1|14=10|17=0-E6|31=100.10|"
        "32=10|37=0-O1|39=2|54=1|55=ACORN.LAB|150=F|151=0|880=0-M1|"),
]


def bench_parser(n: int) -> float:
    d = dictionary.load()
    t = time.perf_counter()
    for i in range(n):
        parse(SAMPLES[i % 3], d)
    return (time.perf_counter() - t) / n * 1e6


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return int(resp.status)
    except OSError:
        return 0


def _start_web(redis_url: str, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "REDIS_URL": redis_url, "FIXLAB_WEB_PORT": str(port), "FIXLAB_WS_QUEUE": "100000"}
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "services.web"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while _get(f"http://127.0.0.1:{port}/api/health") != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"web did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, port


def _lab_id(r: redis.Redis) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rows: Any = r.xrange(streams.LAB_START_STREAM)
        for _, fields in rows:
            for m in decode_batch(fields[streams.BATCH_FIELD]):
                if isinstance(m, LabStart):
                    return m.lab_id
        time.sleep(0.02)
    raise SystemExit("the web service sent no LabStart")


def _play_gateway(r: redis.Redis, lab_id: str, n: int) -> float:
    now = time.time_ns()
    publish(r, streams.lab_stream(lab_id), [LabState(lab_id, "bench", "LAB001", "logged_on", 1, 1, 1, 1, 6,
                                                     now + 600 * 10**9, False, False, (), "", now)], 100_000)
    t = time.perf_counter()
    for start in range(0, n, 50):
        batch = [WireRecord(lab_id, i + 1, "client" if i % 2 else "exchange", SAMPLES[i % 3], False,
                            time.time_ns()) for i in range(start, min(n, start + 50))]
        publish(r, streams.lab_stream(lab_id), batch, 100_000)
    return t


def bench_web(r: redis.Redis, port: int, n: int) -> float:
    ws = connect(f"ws://127.0.0.1:{port}/ws", legacy=True, max_size=2**24)
    try:
        ws.send(json.dumps({"op": "logon"}))
        lab_id = _lab_id(r)
        t = _play_gateway(r, lab_id, n)
        got = 0
        while got < n:
            msg: Any = json.loads(ws.recv(timeout=60))
            got += msg.get("type") == "wire"
        return n / (time.perf_counter() - t)
    finally:
        ws.close()


def bench_browser(r: redis.Redis, port: int, n: int) -> float:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                          "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#conn.on")
            r.delete(streams.LAB_START_STREAM)
            page.click("#b-logon")
            lab_id = _lab_id(r)
            t = _play_gateway(r, lab_id, n)
            page.wait_for_function(f"document.querySelectorAll('#wire .msg').length >= {n}", timeout=120_000)
            return n / (time.perf_counter() - t)
        finally:
            browser.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("-n", type=int, default=2000, help="wire records to send (default 2000)")
    ap.add_argument("--browser", action="store_true", help="also measure the page in headless chromium")
    args = ap.parse_args()
    print(f"parser: {bench_parser(20_000):.1f} us per message (mean of 20,000; Logon, NewOrderSingle, fill)")
    with tempfile.TemporaryDirectory(prefix="fixlab-webbench-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        proc, port = _start_web(server.url, Path(tmp) / "web.log")
        r = redis.Redis.from_url(server.url)
        try:
            rate = bench_web(r, port, args.n)
            print(f"web: {rate:,.0f} wire records/s from the lab stream to a WebSocket page "
                  f"(n={args.n}, parsed and named)")
            if args.browser:
                n = min(args.n, 1500)  # the page keeps the last 1,500 messages
                print(f"browser: {bench_browser(r, port, n):,.0f} wire records/s into the page's DOM (n={n})")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
            r.close()
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
