"""``python -m services.client.scenario FILE...`` (``fixlab scenario FILE...``): play scenarios.

Every file is read first (a syntax error stops the run before any session logs on), then each
scenario is played in turn against ``--host``/``--port``. Exit codes: 0 every expectation held;
1 a scenario failed; 2 bad input (a file that cannot be read or parsed, a bad option); 3 the
exchange could not be reached or refused a Logon; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from services.client.scenario.groups import GroupShape
from services.client.scenario.runner import (
    PhaseNotChanged,
    RecordLike,
    Runner,
    SessionLike,
    SetPhaseFn,
    reachable,
)
from services.client.scenario.syntax import Scenario, ScenarioSyntaxError, parse
from shared import phases, redis_cluster
from shared.config import parse_instruments
from shared.schema import PHASE_NAMES

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it


def client_factory(host: str, port: int) -> Callable[..., SessionLike]:
    """Sessions of ``services.client.session`` (QuickFIX behind a loopback tap; MemoryStore and
    ResetOnLogon=Y: every logon starts both ends' sequence numbers from 1)."""
    from services.client.session import ClientSession  # quickfix: only when a scenario runs

    def make(comp_id: str, heartbeat_s: int, port_override: int | None,
             on_record: Callable[[RecordLike], None], begin: str) -> SessionLike:
        return ClientSession(comp_id, host=host, port=port_override or port, begin=begin,
                             heartbeat_s=heartbeat_s, on_record=on_record)
    return make


def keep_ctrl_c() -> None:
    """Put Python's SIGINT handler back: starting a QuickFIX initiator leaves SIGINT at the C
    default (measured: /proc/<pid>/status SigCgt loses bit 2 at ``start()``), so Ctrl-C would kill
    the process without the sessions' Logouts."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def dictionary_names() -> Callable[[int, str], str]:
    """(150, "F") -> "ExecType=Trade": names for a failure report, from the FIX 4.4 dictionary."""
    from shared.fix.dictionary import load

    d = load()

    def name(tag: int, value: str) -> str:
        meaning = d.meaning(tag, value) if value else ""
        return f"{d.field_name(tag)}={meaning}" if meaning else d.field_name(tag)
    return name


def dictionary_groups() -> Callable[[str], Mapping[int, GroupShape]]:
    """Each MsgType's repeating groups, from the FIX 4.4 dictionary the client's engine uses."""
    from shared.fix.dictionary import load

    groups = load().groups
    return lambda msg_type: groups.get(msg_type, {})


def bus_phase(url: str) -> SetPhaseFn:
    """Phase steps through the bus at ``url``: the SetPhase ``fixlab admin phase`` sends, to the shard
    of the symbol in this environment's instruments (FIXLAB_INSTRUMENTS, FIXLAB_SHARDS)."""
    conn: list[Any] = []

    def set_phase(symbol: str, phase: int, reason: str, timeout_s: float) -> str:
        if not conn:
            conn.append(redis_cluster.connect_any(url, timeout_s=max(2.0, timeout_s)))
        instruments = parse_instruments(os.environ)
        seen = phases.set_phase(conn[0], instruments, symbol, phase, reason, timeout_s)
        if not seen:
            raise PhaseNotChanged(f"no phase change to {PHASE_NAMES[phase]} within {timeout_s:g} s "
                                  "(it may be in that phase already, or its matcher is down)")
        return "; ".join(f"{c.symbol}: {PHASE_NAMES.get(c.prev_phase, c.prev_phase)} -> "
                         f"{PHASE_NAMES.get(c.phase, c.phase)} ({c.reason})" for c in seen)
    return set_phase


def load(paths: Sequence[str]) -> list[Scenario]:
    """Parse every file; raise ScenarioSyntaxError (file:line) or OSError on the first bad one."""
    return [parse(Path(p).read_text(encoding="utf-8"), p) for p in paths]


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fixlab scenario", description="Play FIX scenarios against the "
                                "exchange (format: docs/scenarios.md).")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--host", default="127.0.0.1", help="the exchange's FIX host (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=int(os.environ.get("FIXLAB_FIX_PORT", "9878")),
                   help="its FIX port (default FIXLAB_FIX_PORT or 9878)")
    p.add_argument("--redis-url", default=os.environ.get("REDIS_URL"),
                   help="the bus, for phase steps (default REDIS_URL; make run prints it)")
    p.add_argument("-v", "--verbose", action="store_true", help="print each step as it runs")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None, factory: Callable[..., SessionLike] | None = None) -> int:
    try:
        args = arguments(argv)
    except SystemExit as exc:  # argparse has printed why
        return EXIT_OK if exc.code == 0 else EXIT_BAD_INPUT
    try:
        scenarios = load(args.files)
    except ScenarioSyntaxError as exc:
        print(f"syntax error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (OSError, UnicodeDecodeError) as exc:
        print(f"cannot read {getattr(exc, 'filename', None) or 'a scenario'}: "
              f"{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if factory is None and (why := reachable(args.host, args.port)) is not None:
        print(f"{why} (is the stack running? `make run`; or give --host/--port)", file=sys.stderr)
        return EXIT_UNREACHABLE
    worst = EXIT_OK
    make = factory or client_factory(args.host, args.port)
    groups = None if factory is not None else dictionary_groups()
    names = None if factory is not None else dictionary_names()
    log = (lambda line: print(line, flush=True)) if args.verbose else None
    set_phase = bus_phase(args.redis_url) if args.redis_url else None
    for scenario in scenarios:
        if args.verbose:
            print(f"{scenario.file}: {scenario.title}", flush=True)
        try:
            result = Runner(make, log=log, groups=groups, names=names,
                            engine_started=keep_ctrl_c if factory is None else None,
                            set_phase=set_phase).run(scenario)
        except KeyboardInterrupt:  # the runner has logged its sessions out on the way
            print(f"interrupted in {scenario.file}", file=sys.stderr)
            return EXIT_INTERRUPTED
        if result.ok:
            print(f"PASS {scenario.file} ({len(scenario.steps)} steps, {result.seconds:.1f} s)", flush=True)
            continue
        print(f"FAIL {scenario.file} (step {result.steps_done + 1} of {len(scenario.steps)}, "
              f"{result.seconds:.1f} s)", flush=True)
        for line in result.report:
            print(line, flush=True)
        worst = max(worst, result.exit_code)
    return worst


if __name__ == "__main__":
    sys.exit(main())
