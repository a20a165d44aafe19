"""``python -m benchmarks.uncross --out benchmarks/results/uncross.json``: the call auction's cost in the
engine, and continuous trading against the commit before it (a benchmark, not a test).

Runs:
- uncross: ``--orders`` (10,000) limit orders from 500 sessions rest in an opening call on one
  instrument (prices 1% either side of the reference, so about half of them cross), then the
  SetPhase that ends the call is applied and timed: price finding, every fill, the cancels of what
  At-the-Open orders are left, market data. Best and median of ``--repeat`` fresh books.
- e2e (``--e2e``): the same call on a stack started as ``make run`` starts it, its orders sent by a
  FIX client, and the SetPhase that ends it timed until the auction's last report reaches that
  client (``benchmarks/uncross_e2e.py``; target 1 s).
- continuous: ``benchmarks.matcher``'s reference and deep-book core workloads, timed in this tree
  and in ``--baseline`` (a git revision, unpacked with ``git archive`` into a temporary directory),
  each run in a process of its own, the two trees in turns (each first every other round),
  ``--rounds`` times; ratios of medians.
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
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from services.matcher.engine import Engine, Limits
from shared.config import Instrument
from shared.schema import (
    AT_OPEN,
    BUY,
    DAY,
    PHASE_CONTINUOUS,
    PHASE_PRE_OPEN,
    SELL,
    NewOrder,
    SetPhase,
    as_wire,
)

ROOT = Path(__file__).resolve().parents[1]
ACORN = Instrument("ACORN.LAB", 10000, Decimal("0.01"))
TARGET_MS = 50.0

# Run in each tree's own process: prints the continuous figures as JSON.
_CONTINUOUS = """
import json, sys
from benchmarks.matcher import ACORN, deep_book_commands, reference_commands, time_core
n = int(sys.argv[1])
ref = time_core(ACORN, reference_commands(n), 0, 1)
deep, start = deep_book_commands(n // 4, ACORN)
d = time_core(ACORN, deep, start, 1)
print(json.dumps({"reference_cpu": ref["orders_per_cpu_s_median"], "reference_wall": ref["orders_per_s_best"],
                  "deep_cpu": d["orders_per_cpu_s_median"], "deep_wall": d["orders_per_s_best"]}))
"""


def call_book(n: int, seed: int = 31) -> list[Any]:
    """An opening call of ``n`` limit orders (20 per session), one in ten At the Opening."""
    rnd = random.Random(seed)
    ref = ACORN.reference_ticks
    cmds: list[Any] = [as_wire(SetPhase(ACORN.symbol, PHASE_PRE_OPEN, "bench", 1))]
    for i in range(n):
        session = f"BENCH{i // 20:04d}"
        side = BUY if rnd.random() < 0.5 else SELL
        price = ref + rnd.randint(-100, 100)
        tif = AT_OPEN if i % 10 == 0 else DAY
        cmds.append(as_wire(NewOrder(session, f"U{i}", ACORN.symbol, side, price, rnd.randint(1, 100), tif,
                                     f"gw{i % 2}", i % 20 + 1, 2 + i)))
    return cmds


def time_uncross(n: int, repeat: int) -> dict[str, Any]:
    cmds = call_book(n)
    end = as_wire(SetPhase(ACORN.symbol, PHASE_CONTINUOUS, "open", 10 ** 9))
    times = []
    events = trades = resting_before = 0
    for _ in range(repeat):
        engine = Engine([ACORN], limits=Limits(), book_updates=True)  # as the service runs it
        for i in range(0, len(cmds), 500):
            engine.apply_batch(cmds[i:i + 500])
        resting_before = engine.resting_orders
        t0 = time.perf_counter()
        result = engine.apply_batch([end])
        times.append((time.perf_counter() - t0) * 1000)
        events = len(result.events)
        trades = sum(1 for dest, w in result.events if dest is None and w[0] == 40)
    times.sort()
    return {"resting_orders": resting_before, "events": events, "trades": trades, "repeat": repeat,
            "ms_best": round(times[0], 2), "ms_median": round(times[len(times) // 2], 2),
            "target_ms": TARGET_MS, "under_target": times[len(times) // 2] < TARGET_MS}


def time_continuous(baseline: str, n: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fixlab-baseline-") as tmp:
        archive = subprocess.run(["git", "archive", baseline, "services", "shared", "benchmarks"], cwd=ROOT,
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        trees = {"before": Path(tmp), "after": ROOT}
        runs: dict[str, list[dict[str, int]]] = {k: [] for k in trees}
        for k in range(rounds):
            # each tree first in every other round: neither always runs after the other
            for name, tree in (list(trees.items()) if k % 2 == 0 else list(trees.items())[::-1]):
                out = subprocess.run([sys.executable, "-c", _CONTINUOUS, str(n)], cwd=tree, check=True,
                                     capture_output=True, text=True,
                                     env={**os.environ, "PYTHONPATH": str(tree)}).stdout
                runs[name].append(json.loads(out))
    medians = {name: {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0]} for name, rs in runs.items()}
    ratios = {k: round(medians["after"][k] / medians["before"][k], 3) for k in medians["before"]}
    return {"baseline": baseline, "orders": n, "rounds": rounds, "before": medians["before"],
            "after": medians["after"], "after_over_before": ratios, "runs": runs}


def machine() -> dict[str, str]:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if "Model name" in line), "?")
    return {"nproc": str(os.cpu_count()), "model": model, "python": sys.version.split()[0]}


def markdown(result: dict[str, Any]) -> str:
    u, c = result["uncross"], result["continuous"]
    lines = [
        "# Uncross and continuous trading in the matcher engine",
        "",
        f"`{result['command']}` on {result['date']}, {result['machine']['nproc']} CPUs "
        f"({result['machine']['model']}), Python {result['machine']['python']}; a machine shared with other "
        "work, so figures are noisy.",
        "",
        "## Uncross",
        "",
        f"{u['resting_orders']} resting orders in an opening call; the SetPhase that ends it applied in the "
        f"engine: {u['ms_median']} ms median, {u['ms_best']} ms best of {u['repeat']} "
        f"(target {u['target_ms']:.0f} ms), {u['trades']} trades, {u['events']} events out.",
        "",
        f"## Continuous trading, this tree against {c['baseline']} ({c['rounds']} rounds in turns, medians)",
        "",
        "| figure | before | after | after / before |",
        "|---|---:|---:|---:|",
    ]
    for k, v in c["after_over_before"].items():
        lines.append(f"| {k} (orders/s) | {c['before'][k]} | {c['after'][k]} | {v} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.uncross", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="write the results here as JSON (and .md beside it)")
    p.add_argument("--orders", type=int, default=10_000, help="resting orders in the call")
    p.add_argument("--repeat", type=int, default=5, help="uncross runs: best and median")
    p.add_argument("--baseline", default="", help="git revision for the continuous comparison ('' skips)")
    p.add_argument("--continuous-orders", type=int, default=100_000, help="orders per continuous run")
    p.add_argument("--rounds", type=int, default=3, help="continuous runs per tree, in turns")
    p.add_argument("--e2e", action="store_true", help="also time the uncross end to end on a stack")
    args = p.parse_args(argv)
    result: dict[str, Any] = {
        "command": "python -m benchmarks.uncross " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
        "uncross": time_uncross(args.orders, args.repeat)}
    u = result["uncross"]
    print(f"uncross: {u['resting_orders']} resting -> {u['trades']} trades, {u['events']} events: "
          f"{u['ms_median']} ms median, {u['ms_best']} ms best (target {TARGET_MS:.0f} ms)")
    if args.e2e:
        from benchmarks.uncross_e2e import time_e2e  # quickfix and a whole stack: only when asked

        e = result["e2e"] = time_e2e(args.orders, call_book(args.orders))
        print(f"e2e: {e['orders']} orders in the call (acked in {e['call_orders_acked_s']} s); SetPhase to "
              f"the last of {e['expected_reports']} reports at the client: {e['last_report_ms']} ms "
              f"(first {e['first_report_ms']} ms; target {e['target_ms']:.0f} ms)")
    if args.baseline:
        c = result["continuous"] = time_continuous(args.baseline, args.continuous_orders, args.rounds)
        print(f"continuous vs {args.baseline}: after/before {c['after_over_before']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        if "continuous" in result:
            args.out.with_suffix(".md").write_text(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
