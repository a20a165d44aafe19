"""``fixlab`` / ``python -m shared.streams``: look at the bus without changing it.

    fixlab list [--json]              every stream: length, first and last id, groups, consumers, pending
    fixlab tail STREAM [-n N] [-f]    the last N entries decoded to JSON, one per line; -f follows new ones
                                      (and waits for a stream that does not exist yet)
    fixlab show STREAM ID             one entry, decoded
    fixlab pending GROUP [STREAM]     a group's pending entries (on every stream that has the group)

Redis is REDIS_URL or --url; for a Redis Cluster give any node or a comma list of nodes: every master is
listed and read. Exit status: 0 done, 1 not found or Redis unreachable, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

import redis

from shared import redis_cluster
from shared.bus import REDIS_ERRORS
from shared.config import redact_url
from shared.streams import inspect


def _dump(obj: Any, out: TextIO, pretty: bool) -> None:
    out.write(json.dumps(obj, indent=2 if pretty else None, ensure_ascii=False) + "\n")
    out.flush()


def _table(rows: list[dict[str, Any]], out: TextIO) -> None:
    lines = [("STREAM", "LENGTH", "FIRST", "LAST", "GROUP", "CONSUMERS", "PENDING", "LAG")]
    for s in rows:
        first, last = s["first_id"] or "-", s["last_id"] or "-"
        if not s["groups"]:
            lines.append((s["stream"], str(s["length"]), first, last, "-", "-", "-", "-"))
        for g in s["groups"]:
            consumers = ",".join(f"{c['name']}:{c['pending']}" for c in g["consumers"]) or "-"
            lag = "?" if g["lag"] is None else str(g["lag"])
            lines.append((s["stream"], str(s["length"]), first, last, g["name"], consumers,
                          str(g["pending"]), lag))
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    for line in lines:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() + "\n")
    out.flush()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fixlab", description="Inspect FIX Lab's Redis streams (read-only).")
    p.add_argument("--url", help="Redis URL (default: $REDIS_URL)")
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="every stream with its groups, consumers and pending counts")
    ls.add_argument("--json", action="store_true", help="JSON instead of a table")
    tail = sub.add_parser("tail", help="the last entries of a stream, decoded; -f follows new ones")
    tail.add_argument("stream")
    tail.add_argument("-n", type=int, default=10, help="how many of the last entries (default 10)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new entries")
    show = sub.add_parser("show", help="one entry of a stream, decoded")
    show.add_argument("stream")
    show.add_argument("id")
    pend = sub.add_parser("pending", help="a consumer group's pending entries")
    pend.add_argument("group")
    pend.add_argument("stream", nargs="?")
    pend.add_argument("--count", type=int, default=100, help="most entries listed per stream")
    return p


def run(argv: list[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run one command; returns the exit status."""
    args = _parser().parse_args(argv)
    url = args.url or os.environ.get("REDIS_URL")
    if not url:
        err.write("fixlab: give --url or set REDIS_URL (e.g. redis://127.0.0.1:6379/0)\n")
        return 2
    try:
        # A Redis Cluster (a comma list of nodes, or one node in cluster mode) gets redis-py's cluster
        # client: SCAN then covers every master, and each stream is read from the node holding it.
        r: Any = redis_cluster.connect_any(url, timeout_s=5)
    except ValueError as exc:
        err.write(f"fixlab: {redact_url(url)!r} is not a Redis URL: {exc}\n")
        return 2
    try:
        if args.cmd == "list":
            rows = inspect.list_streams(r)
            if args.json:
                _dump(rows, out, pretty=True)
            else:
                _table(rows, out)
        elif args.cmd == "tail":
            if args.follow and not r.exists(args.stream):
                # A lab session's stream appears when the session starts: wait for it, as tail -F,
                # and print it from its first entry (the one that creates it may come any moment now).
                err.write(f"fixlab: no stream {args.stream!r} yet; waiting for it (Ctrl-C stops)\n")
                err.flush()
                entries, after = [], "0-0"
            else:
                # Followed from the last entry printed, or else from where the stream was before the
                # entries were read: one added meanwhile is printed once, never skipped.
                after = inspect.last_id(r, args.stream) if args.follow else "0-0"
                entries = inspect.last_entries(r, args.stream, args.n)
                after = entries[-1]["id"] if entries else after
            for entry in entries:
                _dump(entry, out, pretty=False)
            if args.follow:
                for item in inspect.follow(r, args.stream, after=after):
                    if item is not None:
                        _dump(item, out, pretty=False)
        elif args.cmd == "show":
            _dump(inspect.show(r, args.stream, args.id), out, pretty=True)
        else:
            _dump(inspect.pending(r, args.group, args.stream, args.count), out, pretty=True)
    except inspect.InspectError as exc:
        err.write(f"fixlab: {exc}\n")
        return 1
    except redis.AuthenticationError as exc:  # before REDIS_ERRORS: it is a ConnectionError
        err.write(f"fixlab: Redis at {redact_url(url)} refused the credentials: {exc}\n")
        return 1
    except REDIS_ERRORS as exc:
        err.write(f"fixlab: Redis at {redact_url(url)} is unreachable: {exc}\n")
        return 1
    except redis.ResponseError as exc:
        err.write(f"fixlab: Redis refused: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # `fixlab tail ... | head` closed the pipe: not an error
        return 0
    finally:
        r.close()
    return 0


def main() -> int:
    """The ``fixlab`` console script."""
    return run(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
