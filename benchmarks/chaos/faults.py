"""Each fault, injected while the load runs against a stack started as ``make run`` starts it.

A fault function kills something with ``os.kill(pid, SIGKILL)``, waits until the stack has put it
back (the runner restarts its services and its redis-server; the gateway its publisher), and returns
what it saw. The harness (``run_case``) then lets the load run on, stops it, waits until every
report has arrived, reads the matcher's state and tallies the ledger against it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.chaos.client import ChaosClient
from benchmarks.chaos.ledger import Tally, tally
from benchmarks.chaos.pages import Pages
from benchmarks.chaos.stack import (
    Runner,
    bots_logged_on,
    children_running,
    matcher_state,
    terminal_events,
    wait_for,
)
from shared.redis_server import free_port

# The load's sessions, from a sessions file of the run's own: the first half keep their resting orders
# when they end (CancelOnDisconnect=N), the second half lose them (the default), so a restart of the
# gateway shows both. CompIDs differ from fault to fault: QuickFIX keeps every session it created in
# one table per process, and a second initiator's session of the same name would not replace it.
COMP_PREFIX = {"matcher": "MAT", "gateway-file": "GWF", "gateway-memory": "GWM", "publisher": "PUB",
               "redis": "RED", "redis-everysec": "RES", "machine": "ALL"}


def sessions_file_text(comp_ids: list[str]) -> str:
    half = len(comp_ids) // 2
    out = []
    for i, comp in enumerate(comp_ids):
        out += ["[SESSION]", f"TargetCompID={comp}"]
        if i < half:
            out.append("CancelOnDisconnect=N")
        out.append("")
    return "\n".join(out)


@dataclass(frozen=True, slots=True)
class Options:
    sessions: int = 4
    window: int = 8
    before_s: float = 8.0  # load before the fault
    after_s: float = 8.0  # load after the stack recovered
    recover_timeout_s: float = 90.0
    settle_s: float = 2.0  # no report for this long: every report has arrived
    pages: int = 2  # lab pages trading through the web meanwhile (0: none)
    env: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Case:
    """One fault's run: the stack, the load, and what they came to."""

    name: str
    fault: str
    runner: Runner
    client: ChaosClient
    comp_ids: list[str]
    saw: list[str] = field(default_factory=list)
    recover_s: float | None = None
    tally: Tally | None = None
    extra_ok: bool = True  # a check of the fault's own (fault 7: ended sessions left nothing resting)


def mark(client: ChaosClient) -> None:
    """From now on, the first New for an order sent after this moment counts as the session's recovery."""
    for d in client.drivers.values():
        with d.lock:
            d.mark = d.next_number
            d.recovered_at = None


def recovered(client: ChaosClient) -> bool:
    return all(d.recovered_at is not None for d in client.drivers.values())


def wait_recovered(case: Case, killed_at: float, timeout_s: float) -> None:
    try:
        wait_for(lambda: recovered(case.client), timeout_s, f"{case.name}: every session trading again")
    except TimeoutError as exc:
        late = [f"{d.comp_id} (from order {d.mark}, now at {d.next_number}, {len(d.outstanding)} unanswered)"
                for d in case.client.drivers.values() if d.recovered_at is None]
        raise TimeoutError(f"{exc}: {', '.join(late)}") from None
    case.recover_s = max(d.recovered_at or 0.0 for d in case.client.drivers.values()) - killed_at


def kill(pid: int) -> float:
    os.kill(pid, signal.SIGKILL)
    return time.monotonic()


# ---------------------------------------------------------------------------------------- the faults

def fault_matcher(case: Case, opts: Options) -> None:
    r = case.runner
    before = r.count(r"run +\| restarted matcher")
    mark(case.client)
    killed_at = kill(r.pid("matcher"))
    wait_for(lambda: r.count(r"run +\| restarted matcher") > before, 30, "the matcher restarted")
    wait_recovered(case, killed_at, opts.recover_timeout_s)
    case.saw.append("no disconnect; acks paused until the new matcher recovered")


def fault_publisher(case: Case, opts: Options) -> None:
    r = case.runner
    gateway = r.pid("gateway")
    [publisher] = [p for p, parent in children_running("services.gateway.publisher").items()
                   if parent == gateway]
    mark(case.client)
    killed_at = kill(publisher)
    wait_for(lambda: any(p != publisher for p, parent in children_running(
        "services.gateway.publisher").items() if parent == gateway), 30, "a new publisher")
    wait_recovered(case, killed_at, opts.recover_timeout_s)
    case.saw.append("no disconnect; the gateway started a new publisher")


def fault_gateway(case: Case, opts: Options) -> None:
    r = case.runner
    before = r.count(r"gateway .*ready on port")
    logons = case.client.logons()
    bot_logons = _bot_logons(r)
    mark(case.client)
    killed_at = kill(r.pid("gateway"))
    wait_for(lambda: r.count(r"gateway .*ready on port") > before, 60, "the new gateway ready")
    wait_for(case.client.all_logged_on, opts.recover_timeout_s, "every session logged on again")
    wait_recovered(case, killed_at, opts.recover_timeout_s)
    case.saw.append(f"disconnected; {case.client.logons() - logons} Logons again (ReconnectInterval=1)")
    # The bots' own health report says how many of their sessions are logged on (every 2 s).
    try:
        wait_for(lambda: _bot_logons(r) > bot_logons and _all_bots(r), 30, "the bots logged on again")
        on, total = bots_logged_on(r.redis())
        case.saw.append(f"bots: {on} of {total} logged on again")
    except TimeoutError:
        on, total = bots_logged_on(r.redis())
        case.saw.append(f"bots: only {on} of {total} logged on again after 30 s")


def _all_bots(r: Runner) -> bool:
    on, total = bots_logged_on(r.redis())
    return on == total



def _bot_logons(r: Runner) -> int:
    return r.count(r"^bots +\|.*logged on; quoting")


def fault_redis(case: Case, opts: Options) -> None:
    r = case.runner
    before = r.count(r"run +\| redis-server exited")
    mark(case.client)
    killed_at = kill(r.redis_pid())
    wait_for(lambda: r.count(r"run +\| redis-server exited") > before, 60, "redis-server restarted")
    wait_recovered(case, killed_at, opts.recover_timeout_s)
    case.saw.append("no disconnect; acks paused until every service had reconnected")


def fault_machine(case: Case, opts: Options) -> None:
    """kill -9 of every process at once, then ``python -m services`` again on the same directory."""
    r = case.runner
    killed_at = time.monotonic()
    r.kill_all()
    case.client.send(False)
    wait_for(lambda: not any(d.logged_on.is_set() for d in case.client.drivers.values()), 30,
             "the clients disconnected")
    case.client.stop()  # a client that talks to the restarted gateway is fault 2; here: the books
    r.start()
    keep = set(case.comp_ids[:len(case.comp_ids) // 2])

    def swept() -> bool:
        rest = matcher_state(r.redis(), r.env)
        return not any(s in case.comp_ids and s not in keep for s, _c in rest)

    try:
        wait_for(swept, opts.recover_timeout_s, "the ended sessions' orders cancelled")
    except TimeoutError:
        case.extra_ok = False
    case.recover_s = time.monotonic() - killed_at
    case.saw.append("disconnected for good (the client stopped); books read after the restart")


FAULTS: dict[str, tuple[str, Callable[[Case, Options], None], dict[str, str]]] = {
    "matcher": ("1. matcher kill -9, runner restarts it", fault_matcher, {}),
    "gateway-file": ("2. gateway kill -9 (FIXLAB_FIX_STORE=file)", fault_gateway,
                     {"FIXLAB_FIX_STORE": "file"}),
    "gateway-memory": ("2. gateway kill -9 (memory store)", fault_gateway, {"FIXLAB_FIX_STORE": "memory"}),
    "publisher": ("3. intake publisher kill -9", fault_publisher, {}),
    "redis": ("4. redis-server kill -9, restarted on its AOF (appendfsync always)", fault_redis,
              {"FIXLAB_REDIS_APPENDFSYNC": "always"}),
    "redis-everysec": ("4. the same with appendfsync everysec", fault_redis,
                       {"FIXLAB_REDIS_APPENDFSYNC": "everysec"}),
    "machine": ("7. every process kill -9, then make run", fault_machine, {}),
}


def run_case(name: str, base: Path, opts: Options) -> Case:
    """Start a stack, run the load, inject ``name``'s fault, and tally what the clients saw."""
    title, inject, env = FAULTS[name]
    work = base / name
    work.mkdir(parents=True, exist_ok=True)
    comp_ids = [f"CHAOS{COMP_PREFIX[name]}{i:02d}" for i in range(1, opts.sessions + 1)]
    (work / "sessions.cfg").write_text(sessions_file_text(comp_ids))
    fix_port, web_port = free_port(), free_port()
    runner = Runner(work / "run", fix_port, web_port, {
        "FIXLAB_FIX_SESSIONS_FILE": str(work / "sessions.cfg"), **env, **opts.env})
    runner.start()
    # Clients that keep their numbers, as a real one does, except against the memory store, which
    # forgets them when the gateway dies: those reset on every Logon, like the bench and the bots.
    keep = env.get("FIXLAB_FIX_STORE", runner.env.get("FIXLAB_FIX_STORE", "memory")) == "file" \
        or name != "gateway-memory"
    client = ChaosClient("127.0.0.1", fix_port, comp_ids, run_tag=f"{name[:3]}{int(time.time()) % 100000}.",
                         window=opts.window, store_dir=work / "client-store", keep_sequences=keep)
    case = Case(name, title, runner, client, comp_ids)
    pages = Pages(f"ws://127.0.0.1:{web_port}/ws", opts.pages) if opts.pages else None
    try:
        client.start()
        if pages is not None:
            pages.start()
        client.send(True)
        time.sleep(opts.before_s)
        inject(case, opts)
        if name != "machine":
            time.sleep(opts.after_s)
            client.send(False)
        if pages is not None:  # before the books are read: their orders would move the stream on
            pages.stop()
            case.saw.append(pages.summary())
            pages = None
        if name != "machine":
            _settle(case, opts)
        resting = matcher_state(runner.redis(), runner.env)
        mine = {c: cum for (s, c), cum in resting.items() if s in comp_ids}
        case.tally = tally(client.ledger.orders, mine, terminal_events(runner.redis()))
        if client.app.rejects_sent:
            case.saw.append(f"{client.app.rejects_sent} session Rejects sent by our strict clients")
    finally:
        if pages is not None:
            pages.stop()
            case.saw.append(pages.summary())
        if name != "machine":
            client.stop()
        runner.stop()
    return case


def _settle(case: Case, opts: Options) -> None:
    """Wait until no report arrived for ``settle_s`` and the matcher has applied its whole stream."""
    last, since = -1, time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        n = case.client.reports()
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= opts.settle_s:
            try:
                matcher_state(case.runner.redis(), case.runner.env)
                return
            except RuntimeError:
                pass
        time.sleep(0.1)
