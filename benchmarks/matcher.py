"""``python -m benchmarks.matcher --out FILE.json``: how fast the matcher is (a benchmark, not a test).

Runs:
- core, reference workload: seed 000's (orders alternate buy and sell, one unit each, at one price,
  so they trade with each other and the book stays small), straight into the engine in batches;
- core, the same workload with order types mixed in (every 10th order IOC, every 20th FOK, at fixed
  places), timed in turns with the plain one in the same run so their ratio is fair;
- core, deep book: a few thousand resting orders over ~400 price levels from 256 sessions, then a
  mix of passive orders, orders that sweep one to several levels, and cancels (FIFO and pro-rata);
- service: the real ``python -m services.matcher`` process on its own redis-server, a producer
  pipelining entries of ``--per-entry`` commands, timed from the first command written to the
  last order's last event read back from the events stream.
Prints a summary and writes every figure, the machine, date, versions and command as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from services.matcher.engine import Engine, Limits
from shared import bus, machine, streams
from shared.bus import id_after
from shared.config import Instrument
from shared.redis_server import RedisServer
from shared.schema import (
    BUY,
    FOK,
    IOC,
    SELL,
    CancelOrder,
    Message,
    NewOrder,
    as_wire,
    decode_batch,
    encode,
    encode_batch,
)

ACORN = Instrument("ACORN.LAB", 10000, Decimal("0.01"))
BATCH = 500  # commands per apply_batch in the core runs (what one service read holds, roughly)
TARGET_CORE = 200_000
TARGET_SERVICE = 50_000


def reference_commands(n: int, sessions: int = 8, gateway: str = "bench") -> list[Message]:
    """Seed 000's workload: alternate buy and sell, one unit, one price, sessions in turn."""
    names = [f"BENCH{i + 1:03d}" for i in range(sessions)]
    seqs = [0] * sessions
    out: list[Message] = []
    for i in range(n):
        k = i % sessions
        seqs[k] += 1
        side = BUY if i % 2 == 0 else SELL
        out.append(NewOrder(names[k], f"R{i}", ACORN.symbol, side, ACORN.reference_ticks, 1, 0, gateway,
                            seqs[k], 1_700_000_000_000_000_000 + i))
    return out


def mixed_reference_commands(n: int, sessions: int = 8) -> list[Message]:
    """The reference workload with 10% IOC and 5% FOK orders (issue 14's mix) at fixed places."""
    out = reference_commands(n, sessions)
    for i, cmd in enumerate(out):
        k = i % 20
        if k in (3, 13):
            out[i] = replace(cmd, tif=IOC)  # type: ignore[type-var]
        elif k == 7:
            out[i] = replace(cmd, tif=FOK)  # type: ignore[type-var]
    return out


def time_in_turns(instrument: Instrument, workloads: dict[str, list[Message]],
                  repeat: int) -> dict[str, dict[str, Any]]:
    """``time_core`` for each workload, one run of each in turn, ``repeat`` times (same conditions)."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in workloads}
    for _ in range(repeat):
        for name, cmds in workloads.items():
            runs[name].append(time_core(instrument, cmds, 0, 1))
    out = {}
    for name, rs in runs.items():
        best = sorted(r["orders_per_s_best"] for r in rs)
        cpu = sorted(r["orders_per_cpu_s_median"] for r in rs)
        out[name] = {**rs[0], "repeat": repeat, "orders_per_s_best": best[-1],
                     "orders_per_s_median": best[len(best) // 2],
                     "orders_per_cpu_s_median": cpu[len(cpu) // 2]}
    return out


def deep_book_commands(n: int, instrument: Instrument, seed: int = 7) -> tuple[list[Message], int]:
    """A deep book, then ``n`` measured commands; returns (all commands, index where measuring starts).

    The workload is built against an engine so each session stays under its 20 open orders
    (cancelling its oldest first), exactly as a well-behaved client would.
    """
    rnd = random.Random(seed)
    engine = Engine([instrument])
    sessions = [f"BENCH{i + 1:03d}" for i in range(256)]
    seqs = dict.fromkeys(sessions, 0)
    ref = instrument.reference_ticks
    out: list[Message] = []
    counter = 0

    def emit(cmd: Message) -> None:
        out.append(cmd)
        engine.apply_batch((cmd,))

    def next_cmd(passive_only: bool) -> Message:
        nonlocal counter
        counter += 1
        s = sessions[rnd.randrange(len(sessions))]
        seqs[s] += 1
        open_orders = engine.open_orders(s)
        ts = 1_700_000_000_000_000_000 + counter
        if len(open_orders) >= 18:
            o = open_orders[0]
            return CancelOrder(s, f"X{counter}", o.clordid, o.symbol, o.side, "bench", seqs[s], ts)
        side = rnd.choice((BUY, SELL))
        book = engine.books[instrument.symbol]
        best_bid, best_ask = book.best_bid() or ref - 1, book.best_ask() or ref + 1
        if passive_only or rnd.random() < 0.7:
            # Rest away from the touch: a deep book over about 200 levels a side.
            price = best_ask - rnd.randint(1, 200) if side == BUY else best_bid + rnd.randint(1, 200)
            price = min(max(price, ref - 1000), ref + 1000)
            qty = rnd.randint(1, 100)
        else:
            # Cross: sweep from one to a few levels.
            price = best_ask + rnd.randint(0, 3) if side == BUY else best_bid - rnd.randint(0, 3)
            qty = rnd.randint(1, 300)
        return NewOrder(s, f"D{counter}", instrument.symbol, side, price, qty, 1, "bench", seqs[s], ts)

    for _ in range(256 * 15):
        emit(next_cmd(passive_only=True))
    start = len(out)
    for _ in range(n):
        emit(next_cmd(passive_only=False))
    return out, start


def time_core(instrument: Instrument, cmds: list[Message], start: int, repeat: int) -> dict[str, Any]:
    """Apply ``cmds[start:]`` after untimed ``cmds[:start]``; the best and median of ``repeat`` runs.

    Commands go in wire form, as the service's consumer hands them over. Rates are given per wall
    second and per CPU second of this process (the latter is steadier on a shared machine).
    """
    wires = [as_wire(c) for c in cmds]
    rates, cpu_rates = [], []
    events = 0
    resting = 0
    for _ in range(repeat):
        engine = Engine([instrument], limits=Limits(), book_updates=True)  # as the service runs it
        for i in range(0, start, BATCH):
            engine.apply_batch(wires[i:min(i + BATCH, start)])
        resting = engine.resting_orders
        measured = wires[start:]
        events = 0
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(0, len(measured), BATCH):
            events += len(engine.apply_batch(measured[i:i + BATCH]).events)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        rates.append(len(measured) / elapsed)
        cpu_rates.append(len(measured) / cpu)
    rates.sort()
    cpu_rates.sort()
    snapshot_bytes = len(encode(engine.snapshot("0", "0-0", 0)))  # what the service would store now
    return {"commands": len(cmds) - start, "resting_before": resting, "events": events, "repeat": repeat,
            "snapshot_bytes": snapshot_bytes,
            "orders_per_s_best": round(rates[-1]), "orders_per_s_median": round(rates[len(rates) // 2]),
            "orders_per_cpu_s_median": round(cpu_rates[len(cpu_rates) // 2])}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields_ = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields_[11]) + int(fields_[12])) / os.sysconf("SC_CLK_TCK")


def run_service(n: int, per_entry: int, workdir: Path) -> dict[str, Any]:
    """The matcher process on its own redis-server, fed by a pipelining producer."""
    cmds = reference_commands(n)
    expected = Engine([ACORN], id_prefix="0-").apply_batch(cmds)
    expected_events = sum(1 for dest, _ in expected.events if dest is not None)
    last_clordid = cmds[-1].clordid  # type: ignore[attr-defined]
    server = RedisServer(workdir / "redis").start()
    env = {**os.environ, "REDIS_URL": server.url, "FIXLAB_INSTRUMENTS": "ACORN.LAB:100.00",
           "FIXLAB_PRO_RATA": "", "FIXLAB_SHARDS": "", "FIXLAB_MATCHER_SHARD": "0", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "services.matcher"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    r = bus.connect(server.url)
    orders = streams.orders_stream("0")
    events_stream = streams.shard_events_stream("0", "bench")
    try:
        deadline = time.monotonic() + 30
        while not r.exists(streams.health_key("matcher", "0")):  # recovered and consuming
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the matcher did not start: " + (proc.stderr.read().decode()[-2000:]
                                                                    if proc.stderr else ""))
            time.sleep(0.05)
        entries = [cmds[i:i + per_entry] for i in range(0, n, per_entry)]
        payloads = [encode_batch(e) for e in entries]  # the load generator's own work, before the clock
        cpu0 = _cpu_seconds(proc.pid)
        t0 = time.perf_counter()
        entry_ids: list[bytes] = []
        pipe = r.pipeline(transaction=False)
        for k, payload in enumerate(payloads):
            pipe.xadd(orders, {streams.BATCH_FIELD: payload}, maxlen=10_000_000, approximate=True)
            if k % 50 == 49:
                entry_ids += pipe.execute()
        entry_ids += pipe.execute()
        written = time.perf_counter() - t0
        # The events are published in the same transaction as the acknowledgement: poll the small
        # applied-id key, then read the last event back to check it is the last order's.
        last_written = entry_ids[-1]
        applied_key = streams.applied_key(orders, streams.MATCHER_GROUP)
        timeout = time.monotonic() + 300
        while r.get(applied_key) != last_written:
            if time.monotonic() > timeout or proc.poll() is not None:
                raise RuntimeError("the matcher did not answer every order")
            time.sleep(0.001)
        tail: Any = r.xrevrange(events_stream, count=1)
        done_at = time.perf_counter()
        last_msgs = decode_batch(tail[0][1][streams.BATCH_FIELD])
        if not any(getattr(m, "clordid", None) == last_clordid for m in last_msgs):
            raise RuntimeError("the last event read is not the last order's")
        elapsed = done_at - t0
        matcher_cpu = _cpu_seconds(proc.pid) - cpu0
        got = 0
        start = "-"
        while True:
            rows: Any = r.xrange(events_stream, min=start, count=1000)
            for _, fields_ in rows:
                got += len(decode_batch(fields_[streams.BATCH_FIELD]))
            if len(rows) < 1000:
                break
            start = "(" + rows[-1][0].decode()
        health: Any = r.hgetall(streams.health_key("matcher", "0"))
        applied: Any = r.get(streams.applied_key(orders, streams.MATCHER_GROUP))
        return {
            "orders": n, "commands_per_entry": per_entry, "entries": len(entries),
            "seconds": round(elapsed, 3), "orders_per_s": round(n / elapsed),
            "producer_write_seconds": round(written, 3),
            "matcher_cpu_seconds": round(matcher_cpu, 3),
            "orders_per_matcher_cpu_s": round(n / matcher_cpu) if matcher_cpu else None,
            "order_events_expected": expected_events, "order_events_read": got,
            "all_answered": got == expected_events and applied is not None
            and not id_after(r.xinfo_stream(orders)["last-generated-id"], applied),
            "matcher_health": {k.decode(): v.decode() for k, v in health.items()},
        }
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
        r.close()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.matcher", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="write the results here as JSON")
    p.add_argument("--orders", type=int, default=200_000, help="orders per core run")
    p.add_argument("--service-orders", type=int, default=200_000, help="orders through the service")
    p.add_argument("--per-entry", type=int, default=50, help="commands per stream entry (service run)")
    p.add_argument("--repeat", type=int, default=3, help="core runs: best and median of this many")
    p.add_argument("--no-service", action="store_true", help="only the core runs")
    args = p.parse_args(argv)
    result: dict[str, Any] = {
        "benchmark": "matcher",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.matcher " + shlex.join(sys.argv[1:] if argv is None else argv),
        **machine.describe(("msgpack", "sortedcontainers")),
        "note": "2 cores shared with whatever else runs: figures are rough while other work runs",
    }
    print(f"matcher bench on {result['machine']['cpu_model']}, {result['machine']['logical_cpus']} cpus, "
          f"load {result['machine']['load_average_at_start']}", flush=True)
    turns = time_in_turns(ACORN, {"plain": reference_commands(args.orders),
                                  "mixed": mixed_reference_commands(args.orders)}, args.repeat)
    ref, mixed = turns["plain"], turns["mixed"]
    result["core_reference"] = ref
    result["core_reference_orders_per_s"] = ref["orders_per_s_median"]
    print(f"core, reference workload: {ref['orders_per_s_median']:,} orders/s median "
          f"(best {ref['orders_per_s_best']:,}, {ref['orders_per_cpu_s_median']:,} per CPU second; "
          f"target {TARGET_CORE:,})", flush=True)
    ratios = {k: round(mixed[k] / ref[k], 3)
              for k in ("orders_per_s_median", "orders_per_s_best", "orders_per_cpu_s_median")}
    result["core_reference_mixed"] = {**mixed, "mix": "10% IOC, 5% FOK", "ratio_to_plain": ratios}
    result["core_reference_mixed_orders_per_s"] = mixed["orders_per_s_median"]
    print(f"core, reference workload with 10% IOC and 5% FOK: {mixed['orders_per_s_median']:,} orders/s "
          f"median (best {mixed['orders_per_s_best']:,}, {mixed['orders_per_cpu_s_median']:,} per CPU "
          "second); "
          f"ratio to the plain workload, same run: {ratios['orders_per_s_median']} median, "
          f"{ratios['orders_per_cpu_s_median']} per CPU second", flush=True)
    pro_rata = Instrument("ACORN.LAB", 10000, Decimal("0.01"), pro_rata=True)
    for name, inst in (("core_deep_book", ACORN), ("core_deep_book_pro_rata", pro_rata)):
        cmds, start = deep_book_commands(args.orders, inst)
        run = time_core(inst, cmds, start, args.repeat)
        result[name] = run
        result[name + "_orders_per_s"] = run["orders_per_s_median"]
        print(f"{name.replace('_', ' ')}: {run['orders_per_s_median']:,} commands/s median "
              f"(best {run['orders_per_s_best']:,}, {run['orders_per_cpu_s_median']:,} per CPU second; "
              f"{run['resting_before']:,} orders resting at the start)", flush=True)
    if not args.no_service:
        with tempfile.TemporaryDirectory(prefix="matcher-bench-") as tmp:
            svc = run_service(args.service_orders, args.per_entry, Path(tmp))
        result["service"] = svc
        result["service_orders_per_s"] = svc["orders_per_s"]
        print(f"service through redis: {svc['orders_per_s']:,} orders/s ({svc['orders']:,} orders in "
              f"{svc['seconds']}s, {svc['order_events_read']:,} order events, all answered: "
              f"{svc['all_answered']}; the matcher used {svc['matcher_cpu_seconds']}s of CPU; "
              f"target {TARGET_SERVICE:,})", flush=True)
    result["targets"] = {
        "core_reference >= 200,000 orders/s": result["core_reference_orders_per_s"] >= TARGET_CORE,
        "core_reference_mixed >= 200,000 orders/s":
            result["core_reference_mixed_orders_per_s"] >= TARGET_CORE,
        "core_deep_book >= 200,000 orders/s": result["core_deep_book_orders_per_s"] >= TARGET_CORE,
    }
    if "service_orders_per_s" in result:
        result["targets"]["service >= 50,000 orders/s"] = result["service_orders_per_s"] >= TARGET_SERVICE
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
