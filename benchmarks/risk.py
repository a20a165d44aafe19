"""What the risk checks cost the intake (not a test): A/B, without and with limits configured.

    python -m benchmarks.risk                       # both parts, ~1-2 minutes on 2 cores
    python -m benchmarks.risk --orders 100000 --gateway-orders 100000 --out risk.json

1. In process (no QuickFIX, no Redis): the engine thread's ``Guard.check`` of each NewOrderSingle,
   and the events thread's ``RiskBook.on_event`` of its Accepted and one Filled, for a session with
   no limits (A: today's default, one set lookup), with all five limits of its own (B), and with
   its own and its firm's (C: two accounts checked and kept). Interleaved rounds, best round, ns per
   order, and each ratio to A.
2. The whole gateway (benchmarks.intake: one FIX session floods NewOrderSingle into a real gateway,
   no matcher), once without and once with the session's and its firm's limits (set wide enough that
   every order passes: each is checked and counted), A, B, A, B: orders/s on the bus and the
   gateway's CPU per order, side by side, and their ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import intake
from benchmarks.fixload import COMP_ID, encode_orders
from services.gateway.guard import Guard
from services.gateway.inbound import Inbound
from services.gateway.risk import NO_LIMITS, Limits, RiskBook, parse_limits
from shared import machine
from shared.config import parse_instruments
from shared.schema import Accepted, Filled

FIRM = "RISKFIRM"


def wide_limits(orders: int) -> dict[str, str]:
    """Every limit, each wide enough for ``orders`` orders of 1 at 100.00 never accepted (no matcher)."""
    return {"MaxOrderQty": "1000", "MaxOrderValue": "1000000", "MaxOpenValue": str(200 * orders),
            "MaxPosition": str(2 * orders), "PriceCollar": "50%"}


def _book(instruments: Any, case: str, orders: int) -> RiskBook:
    limits = parse_limits(wide_limits(orders), "bench")
    own: dict[str, Limits] = {COMP_ID: limits} if case in ("session", "session+firm") else {}
    firms = {FIRM: limits} if case == "session+firm" else {}
    return RiskBook(instruments, own or {COMP_ID: NO_LIMITS}, firms,
                    {COMP_ID: FIRM} if firms else {})


def in_process(orders: int, rounds: int) -> dict[str, Any]:
    instruments = parse_instruments({})
    texts = [raw.decode() for raw in encode_orders(orders, 2, "20260101-00:00:00.000")]
    events: list[Accepted | Filled] = []
    for i in range(orders):
        side = 1 if i % 2 == 0 else 2
        events.append(Accepted(COMP_ID, f"i{i}", f"O{i}", "ACORN.LAB", side, 10000, 1, 0, f"E{i}", 0))
        events.append(Filled(COMP_ID, f"i{i}", f"O{i}", "ACORN.LAB", side, 10000, 1, 10000, 1, 1, 0, 10000,
                             f"M{i}", f"F{i}", 0))
    best: dict[str, dict[str, float]] = {}
    for _ in range(rounds):
        for case in ("none", "session", "session+firm"):
            book = _book(instruments, case, orders)
            book.trade("ACORN.LAB", 10000)  # a last trade: the collar is checked too
            guard = Guard(Inbound(instruments, "bench"), book, time.time_ns)
            start = time.perf_counter_ns()
            for text in texts:
                if guard.check("D", text) is not None:
                    raise RuntimeError(f"{case}: an order was refused")
            check_ns = (time.perf_counter_ns() - start) / orders
            start = time.perf_counter_ns()
            for ev in events:
                book.on_event(ev)
            event_ns = (time.perf_counter_ns() - start) / orders
            row = best.setdefault(case, {"check_ns": check_ns, "events_ns": event_ns})
            row["check_ns"] = min(row["check_ns"], check_ns)
            row["events_ns"] = min(row["events_ns"], event_ns)
    base = best["none"]
    return {"orders": orders, "rounds": rounds,
            "ns_per_order": {case: {k: round(v) for k, v in row.items()} for case, row in best.items()},
            "ratio_to_none": {case: {k: round(v / base[k], 2) for k, v in row.items()}
                              for case, row in best.items()}}


def whole_gateway(orders: int, repeats: int) -> dict[str, Any]:
    limits = "".join(f"{k}={v}\n" for k, v in wide_limits(orders).items())
    firm = f"[FIRM]\nName={FIRM}\nSessions={COMP_ID}\n{limits}"
    runs: dict[str, list[dict[str, Any]]] = {"without limits": [], "with limits": []}
    for i in range(repeats):
        for name, (own, firms) in (("without limits", ("", "")), ("with limits", (limits, firm))):
            print(f"risk: gateway intake {name} ({i + 1}/{repeats}), {orders:,} orders", file=sys.stderr)
            result = intake.run(orders, None, None, session_settings=own, firms=firms)
            refused = int(result["gateway_health"].get("risk_refused", 0))
            if refused:
                raise RuntimeError(f"{name}: {refused} orders refused by the limits")
            runs[name].append({k: result[k] for k in ("orders_per_s", "gateway_cpu_us_per_order",
                                                      "publisher_cpu_us_per_order")})
    out: dict[str, Any] = {"orders": orders, "runs": runs}
    for key in ("orders_per_s", "gateway_cpu_us_per_order"):
        a = [r[key] for r in runs["without limits"]]
        b = [r[key] for r in runs["with limits"]]
        out[f"ratio {key} (with/without, run by run)"] = [round(y / x, 3) for x, y in zip(a, b, strict=True)
                                                          if x and y]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=50_000, help="orders per in-process round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gateway-orders", type=int, default=100_000,
                        help="orders per whole-gateway run (0: skip that part)")
    parser.add_argument("--repeats", type=int, default=2, help="whole-gateway A/B pairs")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "benchmark": "risk checks' intake cost: Guard.check, RiskBook.on_event; gateway intake A/B",
        "command": "python -m benchmarks.risk " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        **machine.describe(),
        "in_process": in_process(args.orders, args.rounds),
    }
    if args.gateway_orders:
        result["gateway"] = whole_gateway(args.gateway_orders, args.repeats)
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
