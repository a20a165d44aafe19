"""``fixlab admin phase|halt|resume``: an instrument's trading phase, set by hand.

    fixlab admin phase ACORN.LAB pre_open     the opening call (or closed, continuous, pre_close, halted)
    fixlab admin halt ACORN.LAB news pending  a halt: a call, until resume
    fixlab admin resume ACORN.LAB             the resume auction, then continuous trading

Each sends a SetPhase on the orders stream of the instrument's matcher shard (so a replay of that
stream does the same), then waits, until the deadline, for the PhaseChanged the matcher publishes on
its market stream, and says it: ``ACORN.LAB: CONTINUOUS -> HALTED (news pending)``. An unknown symbol
or phase is one line and exit 1, with nothing sent. ``*`` names every instrument (a SetPhase to each
shard). A SetPhase to the phase an instrument is in changes nothing: no PhaseChanged comes, and the
command says so and exits 1. The matcher takes SetPhase from the orders stream as it takes orders; what
guards it is the operator's token that ``fixlab admin`` needs and Redis's own access.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from shared.config import ConfigError, parse_instruments
from shared.phases import PHASES, phase_of, set_phase
from shared.schema import ALL_SYMBOLS, PHASE_CONTINUOUS, PHASE_HALTED, PHASE_NAMES

__all__ = ["PHASES", "phase_of", "register", "run_phase"]


def register(sub: Any) -> None:
    p = sub.add_parser("phase", help="put SYMBOL into PHASE (" + ", ".join(PHASES) + ")",
                       description="Put SYMBOL (or * for every instrument) into PHASE.")
    p.add_argument("symbol", metavar="SYMBOL")
    p.add_argument("phase", metavar="PHASE", help=", ".join(PHASES))
    p.add_argument("reason", nargs="*", help="why (told to clients in SecurityStatus Text)")
    p.set_defaults(run=run_phase)
    p = sub.add_parser("halt", help="halt SYMBOL: a call until resume", description="Halt SYMBOL.")
    p.add_argument("symbol", metavar="SYMBOL")
    p.add_argument("reason", nargs="*")
    p.set_defaults(run=run_phase, phase="halted")
    p = sub.add_parser("resume", help="resume SYMBOL: its auction, then continuous trading",
                       description="Resume SYMBOL after a halt.")
    p.add_argument("symbol", metavar="SYMBOL")
    p.add_argument("reason", nargs="*")
    p.set_defaults(run=run_phase, phase="continuous")


def run_phase(args: argparse.Namespace, ctx: Any) -> int:
    try:
        instruments = parse_instruments(os.environ)
    except ConfigError as exc:
        ctx.out.write(f"fixlab admin: {exc}\n")
        return 1
    phase = phase_of(args.phase)
    if phase is None:
        ctx.out.write(f"unknown phase {args.phase!r}: one of {', '.join(PHASES)}; nothing was sent\n")
        return 1
    shard_of = {i.symbol: i.shard for i in instruments}
    symbol = args.symbol
    if symbol != ALL_SYMBOLS and symbol not in shard_of:
        ctx.out.write(f"unknown symbol {symbol!r}: this exchange trades {', '.join(shard_of)}; "
                      "nothing was sent\n")
        return 1
    reason = " ".join(args.reason) or _default_reason(phase)
    wanted = set(shard_of) if symbol == ALL_SYMBOLS else {symbol}
    seen = set_phase(ctx.r, instruments, symbol, phase, reason, ctx.deadline_s)
    for change in seen:
        ctx.out.write(f"{change.symbol}: {PHASE_NAMES.get(change.prev_phase, change.prev_phase)} -> "
                      f"{PHASE_NAMES.get(change.phase, change.phase)} ({change.reason})\n")
    missing = sorted(wanted - {c.symbol for c in seen})
    if missing and symbol != ALL_SYMBOLS:
        ctx.out.write(f"{symbol}: no phase change within {ctx.deadline_s:g} s: it may be "
                      f"{PHASE_NAMES[phase]} already (a SetPhase to its own phase does nothing), "
                      "or its matcher is down\n")
        return 1
    if missing:
        ctx.out.write(f"unchanged within {ctx.deadline_s:g} s: {', '.join(missing)}\n")
    return 0 if seen else 1


def _default_reason(phase: int) -> str:
    if phase == PHASE_HALTED:
        return "halted by the operator"
    if phase == PHASE_CONTINUOUS:
        return "by the operator"
    return f"{PHASE_NAMES[phase].lower()} by the operator"
