"""``python -m benchmarks.chaos`` (``make chaos``): each fault of issue 13 under load, one table.

Every case starts its own stack as ``make run`` does (``python -m services``: its runner, a private
redis-server with the AOF, matcher, gateway, web, bots) on free ports in a directory of its own, puts
a load of QuickFIX initiator sessions on it (benchmarks/chaos/client.py), kills something with
kill -9, lets the load run on, stops it, and compares every ExecutionReport the clients received
with the matcher's state read afresh (benchmarks/chaos/ledger.py says what lost and duplicated mean).
The table is printed and written to benchmarks/results/chaos.md (and .json) with the machine and the
command; the exit status is 1 when any order was lost or duplicated.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.chaos.faults import FAULTS, Case, Options, run_case
from shared import logs
from shared.machine import describe

RESULTS = Path(__file__).resolve().parents[1] / "results"
HEAD = ("fault", "orders sent", "acknowledged", "filled", "lost", "duplicated", "time to recover",
        "what the FIX clients and pages saw")


def row(case: Case) -> tuple[str, ...]:
    t = case.tally
    if t is None:
        return (case.fault, "-", "-", "-", "-", "-", "-", "; ".join(case.saw) or "did not finish")
    saw = list(case.saw)
    extra = [f"{n} {what}" for n, what in (
        (t.cancelled, "cancelled"), (t.resting, "resting at the end"), (t.rejected, "rejected"),
        (t.unreported, "unreported (done on the bus, report never received)"),
        (t.redelivered, "reports received twice (same ExecID)"),
        (t.resent, "reports recovered by ResendRequest (PossDupFlag=Y)"),
        (t.unanswered, "never answered, not on the bus"),
        (t.unconfirmed, "in the book without a New received")) if n]
    if not case.extra_ok:
        extra.append("ENDED SESSIONS' ORDERS STILL RESTING")
    recover = f"{case.recover_s:.1f} s" if case.recover_s is not None else "-"
    return (case.fault, str(t.sent), str(t.acknowledged), str(t.filled), str(t.lost), str(t.duplicated),
            recover, "; ".join(saw + extra))


def markdown(rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of: {', '.join(FAULTS)}")
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--before", type=float, default=8.0, help="seconds of load before the fault")
    p.add_argument("--after", type=float, default=8.0, help="seconds of load after the recovery")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment of every stack (e.g. FIXLAB_REDIS_APPENDFSYNC=everysec)")
    p.add_argument("--out", type=Path, default=RESULTS / "chaos.md",
                   help="the table (markdown; the same as JSON next to it); '-' writes nothing")
    p.add_argument("--workdir", type=Path, help="keep the run directories here (default: a temporary one)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.setup("chaos")
    names = [n.strip() for n in args.faults.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        print(f"chaos: unknown fault {', '.join(unknown)} (known: {', '.join(FAULTS)})", file=sys.stderr)
        return 2
    env = dict(item.split("=", 1) for item in args.env)
    opts = Options(sessions=args.sessions, window=args.window, before_s=args.before, after_s=args.after,
                   env=env)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cases: list[Case] = []
    with tempfile.TemporaryDirectory(prefix="fixlab-chaos-") as tmp:
        base = args.workdir or Path(tmp)
        for name in names:
            print(f"chaos: {FAULTS[name][0]} ...", flush=True)
            try:
                case = run_case(name, base, opts)
            except (TimeoutError, RuntimeError, LookupError, ValueError) as exc:
                case = Case(name, FAULTS[name][0], None, None, [])  # type: ignore[arg-type]
                case.saw.append(f"FAILED: {exc}")
            cases.append(case)
            print(markdown([row(case)]).splitlines()[-1], flush=True)
    rows = [row(c) for c in cases]
    table = markdown(rows)
    command = "python -m benchmarks.chaos " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    print()
    print(table, end="")
    failed = [c for c in cases if c.tally is None or not c.tally.ok() or not c.extra_ok]
    if str(args.out) != "-":
        info = describe()
        m = info["machine"]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            f"# Fault suite (issue 13)\n\n{started}, `{command.strip()}`\n\n"
            f"Machine: {m['cpu_model']}, {m['logical_cpus']} logical CPUs, {m['memory_gib']} GiB, "
            f"{m['kernel']}; redis-server {info['versions']['redis_server']}, quickfix "
            f"{info['versions']['quickfix']}, load average at start {m['load_average_at_start']}.\n"
            f"Load: {opts.sessions} sessions x window {opts.window}, {opts.before_s:g} s before the fault, "
            f"{opts.after_s:g} s after the recovery. Definitions: docs/RELIABILITY.md.\n\n" + table)
        record: dict[str, Any] = {"date": started, "command": command.strip(), **info,
                                  "options": dataclasses.asdict(opts), "cases": [
                                      {"name": c.name, "fault": c.fault, "saw": c.saw,
                                       "recover_s": c.recover_s, "extra_ok": c.extra_ok, "figures": c.figures,
                                       "tally": dataclasses.asdict(c.tally) if c.tally else None}
                                      for c in cases]}
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
