"""``python -m services.bench.versions`` (in ``make bench``): 4x8 for each FIX version, side by side.

One lean exchange (services.bench.procs.Stack: redis-server, matcher, gateway), then the bench's
4 sessions x 8 in flight with ``--fix-version 4.4``, ``4.2`` and ``5.0SP2`` in turn (BENCH001..,
BENCH42-001.., BENCH50-001.., each validating with its version's dictionary), ``--rounds`` times,
alternated so that a slow spell of a shared machine falls on every version alike. Reports each
version's orders/s (the median of its rounds) and its ratio to FIX 4.4's; issue 25's target is
0.9 or more for each. Writes services/bench/results/versions.json and versions.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from services.bench.procs import Stack
from services.bench.suite import RESULTS_DIR, RunSpec, bench_once, say
from shared import machine

VERSIONS = ("4.4", "4.2", "5.0SP2")
TARGET_RATIO = 0.9


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"# 4x8 per FIX version ({doc['date']}, {doc.get('machine', {}).get('cpu_model', '?')})", "",
             f"`{doc['command']}`: {doc['orders']:,} orders per run, {doc['rounds']} rounds alternated, "
             "one lean exchange.", "",
             "| version | orders/s (median) | rounds | p50 µs | ratio to 4.4 | target 0.9 |",
             "| --- | ---: | --- | ---: | ---: | --- |"]
    for v, row in doc["versions"].items():
        rounds = ", ".join(f"{x:,.0f}" for x in row["rounds"])
        met = "met" if row["ratio"] >= TARGET_RATIO else "NOT met"
        lines.append(f"| {v} | {row['orders_per_s']:,.0f} | {rounds} | {row['p50_us']:,.0f} | "
                     f"{row['ratio']:.2f} | {met} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.bench.versions", description=__doc__)
    p.add_argument("--orders", type=int, default=40_000, help="measured orders per run")
    p.add_argument("--warmup", type=int, default=500, help="warm-up orders per session")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    spec = RunSpec("concurrent", 4, 8, args.orders)
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in VERSIONS}
    with tempfile.TemporaryDirectory(prefix="fixlab-versions-") as tmp, Stack(Path(tmp) / "stack") as stack:
        for round_no in range(args.rounds):
            order = VERSIONS if round_no % 2 == 0 else tuple(reversed(VERSIONS))
            for v in order:
                say(f"versions: round {round_no + 1}, FIX {v}, 4x8, {args.orders:,} orders")
                record, _lat = bench_once(spec, stack.fix_port, args.warmup, Path(tmp),
                                          f"v{v}-{round_no}", 10.0, extra=("--fix-version", v))
                rows[v].append(record)
    base = statistics.median(r["orders_per_s"] for r in rows["4.4"])
    out: dict[str, Any] = {}
    for v, records in rows.items():
        rate = statistics.median(r["orders_per_s"] for r in records)
        out[v] = {"orders_per_s": rate, "rounds": [r["orders_per_s"] for r in records],
                  "p50_us": statistics.median(r["ack_p50_us"] for r in records),
                  "lost": sum(r["lost"] for r in records), "ratio": round(rate / base, 3) if base else 0.0}
    doc = {**machine.describe(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "command": "python -m services.bench.versions " + " ".join(sys.argv[1:] if argv is None else argv),
           "orders": args.orders, "rounds": args.rounds, "versions": out,
           "target_met": all(row["ratio"] >= TARGET_RATIO and row["lost"] == 0 for row in out.values())}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "versions.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.results_dir / "versions.md").write_text(markdown(doc))
    for v, row in out.items():
        say(f"FIX {v}: {row['orders_per_s']:,.0f} orders/s at 4x8 (x{row['ratio']:.2f} of 4.4), "
            f"lost {row['lost']}")
    return 0 if doc["target_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
