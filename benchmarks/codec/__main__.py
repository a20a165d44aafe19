"""``python -m benchmarks.codec``: seed 004's FIX codec comparison, with Python rows.

For each pinned message (../shared/fixtures/codec/: NewOrderSingle, ExecutionReport, a ten-level
MarketDataSnapshot) and each operation (encode, checked parse, parse + extract), every adapter is
timed as seed 004 times its rows: ``--samples`` clock samples after ``--warmup`` more, each sample
the mean of 32 operations; ns/operation at p50, p90, p99 and p99.9. Before any timing, every adapter
must pass the mutation probes (a changed order id, deeper book levels, a price or size, framing still
valid) on every parse operation, and its encoder must write exactly the values it is given: an
adapter that fails is reported and not ranked. Results: services/bench/results/codec.{md,svg,json}.
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.codec import oracle
from benchmarks.codec.adapters import Adapter, adapters
from benchmarks.codec.report import write_report
from shared.fix.codec import framing_problems
from shared.machine import describe

OPS_PER_SAMPLE = 32
OPERATIONS = ("encode", "checked parse", "parse + extract")
RESULTS = Path(__file__).resolve().parents[2] / "services" / "bench" / "results"


def probe(adapter: Adapter, pinned: oracle.Pinned) -> list[str]:
    """What the adapter gets wrong on this message ([] when it reads and writes every value)."""
    failures: list[str] = []
    ops = adapter.operations(pinned)
    try:
        out = ops["encode"](pinned.values)
        raw = out if isinstance(out, bytes) else str(out).encode("ascii")
        if framing_problems(raw) or oracle.values_of(pinned.kind, raw) != pinned.values:
            failures.append("encode: the message does not carry the values given")
        changed = _changed(pinned)
        out = ops["encode"](changed)
        raw = out if isinstance(out, bytes) else str(out).encode("ascii")
        if oracle.values_of(pinned.kind, raw) != changed:
            failures.append("encode: a changed value is not in the message (values ignored)")
    except Exception as exc:
        failures.append(f"encode: {type(exc).__name__}: {exc}")
    for op in OPERATIONS[1:]:
        try:
            ops[op](pinned.raw)
        except Exception as exc:
            failures.append(f"{op}: the pinned message fails: {type(exc).__name__}: {exc}")
        for name, raw in oracle.mutated(pinned):
            try:
                ops[op](raw)
            except oracle.Mismatch:
                continue
            except Exception as exc:
                failures.append(f"{op}: probe {name}: {type(exc).__name__}, not a value mismatch: {exc}")
                continue
            failures.append(f"{op}: probe {name} not detected")
    return failures


def _changed(pinned: oracle.Pinned) -> oracle.Values:
    """The pinned values with one number changed (the encoder probe)."""
    v = list(pinned.values)
    if pinned.kind == "W":
        entries = list(v[3])  # type: ignore[call-overload]
        entries[-1] = (entries[-1][0], entries[-1][1], 100000)
        v[3] = tuple(entries)
    else:
        at = [t for _, t in oracle.FIELDS[pinned.kind]].index("p")
        v[at] = int(v[at]) + 9  # type: ignore[call-overload]
    return tuple(v)


def time_operation(fn: Callable[[Any], object], arg: object, samples: int, warmup: int) -> list[float]:
    """ns/operation of ``samples`` clock samples, each the mean of 32 calls, after ``warmup`` samples."""
    clock = time.perf_counter_ns
    batch = range(OPS_PER_SAMPLE)
    out = [0.0] * samples
    for i in range(-warmup, samples):
        t0 = clock()
        for _ in batch:
            fn(arg)
        t1 = clock()
        if i >= 0:
            out[i] = (t1 - t0) / OPS_PER_SAMPLE
    return out


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    n = len(s)
    return {name: round(s[min(n - 1, int(q * n))], 1)
            for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999))}


def timed_by(run: dict[str, Any], names: list[str]) -> list[str]:
    """The adapters a recorded run timed: its own list, or (older runs) read from its --adapter options."""
    if "timed" in run:
        return list(run["timed"])
    words = shlex.split(run["command"])
    wanted = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--adapter"]
    if "--probes-only" in words:
        return []
    return [n for n in names if not wanted or any(a in n for a in wanted)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.codec", description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=50_000, help="timed samples per operation")
    parser.add_argument("--warmup", type=int, default=5_000, help="untimed samples before them")
    parser.add_argument("--fixtures", type=Path, default=oracle.FIXTURES, help="seed 004's pinned messages")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where codec.md, .svg and .json go")
    parser.add_argument("--probes-only", action="store_true", help="check the adapters, time nothing")
    parser.add_argument("--adapter", action="append", default=[],
                        help="time only adapters whose name contains this (repeatable; all are probed)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the other adapters' rows already in codec.json (rows say their samples)")
    args = parser.parse_args(argv)
    try:
        pinned = {kind: oracle.load(kind, args.fixtures) for kind in oracle.FILES}
    except (OSError, ValueError) as exc:
        print(f"codec bench: cannot read seed 004's pinned messages: {exc}", file=sys.stderr)
        return 2
    started = time.time()
    context = describe(("simplefix",))
    context["command"] = shlex.join(["python", "-m", "benchmarks.codec",
                                     *(argv if argv is not None else sys.argv[1:])])
    context["ops_per_sample"] = OPS_PER_SAMPLE
    rows: list[dict[str, Any]] = []
    failed: dict[str, list[str]] = {}
    measured = adapters()
    for adapter in measured:
        problems = [f"{kind}: {p}" for kind, pin in pinned.items() for p in probe(adapter, pin)]
        print(f"{adapter.name}: {'probes passed' if not problems else 'FAILED ' + '; '.join(problems)}",
              flush=True)
        if problems:
            failed[adapter.name] = problems
            continue
        if args.probes_only or (args.adapter and not any(a in adapter.name for a in args.adapter)):
            continue
        for kind, pin in pinned.items():
            ops = adapter.operations(pin)
            for op in OPERATIONS:
                arg = pin.values if op == "encode" else pin.raw
                gc.collect()
                t0 = time.monotonic()
                stats = percentiles(time_operation(ops[op], arg, args.samples, args.warmup))
                rows.append({"adapter": adapter.name, "message": kind, "operation": op, **stats,
                             "samples": args.samples, "warmup": args.warmup,
                             "seconds": round(time.monotonic() - t0, 1)})
                print(f"  {kind} {op:16} p50 {stats['p50']:>11,.0f} ns  p99 {stats['p99']:>11,.0f} ns "
                      f"({rows[-1]['seconds']} s)", flush=True)
    if failed:
        print("codec bench: adapters not ranked: " + ", ".join(failed), file=sys.stderr)
    if args.probes_only:
        return 1 if failed else 0
    context["wall_seconds"] = round(time.time() - started)
    context["timed"] = sorted({r["adapter"] for r in rows})
    runs = [context]
    args.out.mkdir(parents=True, exist_ok=True)
    # Runs of different adapters may go side by side (one per core) into one table: each merges
    # into what is there under an exclusive lock, so neither overwrites the other's rows.
    with open(args.out / ".codec.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if args.merge and (args.out / "codec.json").is_file():
            earlier = json.loads((args.out / "codec.json").read_text())
            timed = {r["adapter"] for r in rows}
            rows = [r for r in earlier["rows"] if r["adapter"] not in timed] + rows
            # An earlier run none of whose rows are left says nothing about the table any more.
            names = [a.name for a in measured]
            runs = [r for r in earlier["runs"] if not set(timed_by(r, names)) <= timed] + runs
        result = {"runs": runs, "adapters": {a.name: a.note for a in measured}, "rows": rows,
                  "not_ranked": failed}
        (args.out / "codec.json").write_text(json.dumps(result, indent=1) + "\n")
        write_report(result, args.out / "codec.md", args.out / "codec.svg")
    print(f"codec bench: {args.out / 'codec.md'} ({context['wall_seconds']} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
