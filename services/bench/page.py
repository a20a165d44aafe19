"""``python -m services.bench.page --url ws://HOST:PORT/ws --out FILE``: a lab page watching the books.

What the page (services/web/static/app.js) does when it is open and nobody logs on: one WebSocket
to the web service, every message read and decoded (hello, the market snapshot, then each
``depth`` and ``trade`` the web service broadcasts). The suite runs it beside the bench on the full
stack, so the web service does for it what it does for a visitor. On SIGTERM or SIGINT it writes
what it received as JSON and exits.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect


def watch(url: str, out: Path, stop_after_s: float | None = None) -> int:
    stopping = False

    def on_signal(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    counts: Counter[str] = Counter()
    frames = size = 0
    books: dict[str, Any] = {}
    started = time.monotonic()
    closed = ""
    with connect(url, max_size=2**22, open_timeout=10) as ws:
        while not stopping and (stop_after_s is None or time.monotonic() - started < stop_after_s):
            try:
                frame = ws.recv(timeout=0.2)
            except TimeoutError:
                continue
            except ConnectionClosed as exc:
                closed = f"closed by the server: {exc}"
                break
            frames += 1
            size += len(frame)
            msg = json.loads(frame)
            kind = msg.get("type", "?")
            counts[kind] += 1
            if kind == "depth":
                books[msg["symbol"]] = {"bids": msg["bids"][:1], "asks": msg["asks"][:1]}
    seconds = time.monotonic() - started
    out.write_text(json.dumps({"url": url, "seconds": round(seconds, 3), "frames": frames, "bytes": size,
                               "by_type": dict(counts), "best": books, "closed": closed}, indent=2) + "\n")
    return 1 if closed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.bench.page", description=__doc__)
    p.add_argument("--url", required=True, help="the web service's WebSocket, ws://HOST:PORT/ws")
    p.add_argument("--out", type=Path, required=True, help="write what was received here (JSON)")
    p.add_argument("--seconds", type=float, help="stop after this long (default: at SIGTERM)")
    args = p.parse_args(argv)
    try:
        return watch(args.url, args.out, args.seconds)
    except (OSError, TimeoutError) as exc:
        print(f"page: cannot watch {args.url}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
