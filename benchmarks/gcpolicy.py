"""``python -m benchmarks.gcpolicy``: what the services' collector policy (shared/gcpolicy.py) buys.

The matcher's pure core, on seed 000's reference workload and on the deep book, timed in turns under
CPython's default collector policy and under ``tuned`` (start-up frozen, young passes every 20,000
allocations), in one process: each turn resets the policy, so both see the same machine at nearly
the same moment. Figures are orders per CPU second of this process (steadier than wall time on a
shared machine), the median of ``--repeat`` turns, and their ratio. The heap before each turn is
what importing the matcher service leaves (about 35,000 objects), as in the real process.
"""

from __future__ import annotations

import argparse
import gc
import json
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import services.matcher.service  # noqa: F401  (the matcher process's heap: its imports)
from benchmarks.matcher import ACORN, deep_book_commands, reference_commands, time_core
from shared import gcpolicy, machine

CPYTHON_DEFAULT = (700, 10, 10)


def set_policy(name: str) -> None:
    """Undo any earlier turn's policy, then apply ``name`` as a service does after start-up."""
    gc.unfreeze()
    gc.set_threshold(*CPYTHON_DEFAULT)
    gcpolicy.apply(name)


def run(orders: int, repeat: int) -> dict[str, Any]:
    reference = reference_commands(orders)
    deep, start = deep_book_commands(orders, ACORN)
    rates: dict[str, dict[str, list[int]]] = {p: {"reference": [], "deep_book": []}
                                              for p in (gcpolicy.DEFAULT, gcpolicy.TUNED)}
    for _ in range(repeat):
        for name, per in rates.items():
            set_policy(name)
            per["reference"].append(time_core(ACORN, reference, 0, 1)["orders_per_cpu_s_median"])
            per["deep_book"].append(time_core(ACORN, deep, start, 1)["orders_per_cpu_s_median"])
    set_policy(gcpolicy.DEFAULT)
    out: dict[str, Any] = {}
    for name, per in rates.items():
        out[name] = {w: sorted(v)[len(v) // 2] for w, v in per.items()}
    out["ratio_tuned_to_default"] = {w: round(out[gcpolicy.TUNED][w] / out[gcpolicy.DEFAULT][w], 3)
                                     for w in ("reference", "deep_book")}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gcpolicy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--orders", type=int, default=100_000, help="orders per turn and workload")
    p.add_argument("--repeat", type=int, default=5, help="turns per policy (the median is kept)")
    p.add_argument("--out", type=Path, help="write the results here as JSON")
    args = p.parse_args(argv)
    result: dict[str, Any] = {
        "benchmark": "gcpolicy",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.gcpolicy " + shlex.join(sys.argv[1:] if argv is None else argv),
        **machine.describe(("msgpack", "sortedcontainers")),
        "unit": "matcher core orders per CPU second (median of the turns)",
        "tuned_thresholds": list(gcpolicy.TUNED_THRESHOLDS),
    }
    result.update(run(args.orders, args.repeat))
    for w in ("reference", "deep_book"):
        print(f"{w.replace('_', ' ')}: default {result[gcpolicy.DEFAULT][w]:,}/CPU s, "
              f"tuned {result[gcpolicy.TUNED][w]:,}/CPU s, x{result['ratio_tuned_to_default'][w]}",
              flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
