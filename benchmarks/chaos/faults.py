"""Each fault, injected while the load runs against a stack started as ``make run`` starts it.

A fault function kills something with ``os.kill(pid, SIGKILL)``, waits until the stack has put it
back (the runner restarts its services and its redis-server; the gateway its publisher), and returns
what it saw. The harness (``run_case``) then lets the load run on, stops it, waits until every
report has arrived, reads the matcher's state and tallies the ledger against it.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.chaos.client import ChaosClient
from benchmarks.chaos.ledger import Tally, tally
from benchmarks.chaos.pages import Pages
from benchmarks.chaos.slow import DeafFix, StalledPage
from benchmarks.chaos.stack import (
    MatcherBehind,
    Runner,
    bots_logged_on,
    children_running,
    matcher_state,
    terminal_events,
    wait_for,
)
from benchmarks.load import rss_mib
from services.matcher.engine import Engine, Limits
from shared import bus, streams
from shared.config import Instrument, common_settings
from shared.redis_server import free_port
from shared.schema import (
    AT_OPEN,
    BUY,
    DAY,
    PHASE_CONTINUOUS,
    PHASE_PRE_OPEN,
    SELL,
    Accepted,
    Cancelled,
    Filled,
    Message,
    NewOrder,
    SetPhase,
    decode_batch,
)

# The load's sessions, from a sessions file of the run's own: the first half keep their resting orders
# when they end (CancelOnDisconnect=N), the second half lose them (the default), so a restart of the
# gateway shows both. CompIDs differ from fault to fault: QuickFIX keeps every session it created in
# one table per process, and a second initiator's session of the same name would not replace it.
COMP_PREFIX = {"matcher": "MAT", "gateway-file": "GWF", "gateway-memory": "GWM", "publisher": "PUB",
               "redis": "RED", "redis-everysec": "RES", "web": "WEB", "slow": "SLW", "machine": "ALL",
               "matcher-call": "MAC", "matcher-uncross": "MUX"}
# Fault 6's slow FIX peers (benchmarks/chaos/slow.py): one that sends orders and never reads its
# reports, one market-data subscriber that never reads its updates.
SLOW_COMP_IDS = ["CHAOSSLWDEAF", "CHAOSSLWMD"]


def sessions_file_text(comp_ids: list[str], others: list[str] | None = None) -> str:
    half = len(comp_ids) // 2
    out = []
    for i, comp in enumerate(comp_ids + (others or [])):
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
    pages: Pages | None = None
    figures: dict[str, object] = field(default_factory=dict)  # a fault's own measures (fault 6: RSS)


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


def _set_phase(case: Case, phase: int, reason: str) -> dict[str, str]:
    """A SetPhase of every instrument on every shard's orders stream (as an operator's command does);
    returns each orders stream's entry id."""
    env = case.runner.env
    shards = sorted({i.shard for i in common_settings({"REDIS_URL": "redis://unused", **env}).instruments})
    red = case.runner.redis()
    ids = {}
    for shard in shards:
        stream = streams.orders_stream(shard)
        entry: Any = bus.publish(red, stream, [SetPhase("*", phase, reason, time.time_ns())], 1_000_000)
        ids[stream] = entry.decode() if isinstance(entry, bytes) else str(entry)
    return ids


def fault_matcher_call(case: Case, opts: Options) -> None:
    """Issue 31: kill -9 of the matcher while orders collect in an opening call, then again as soon as
    it has applied the uncross (the call's end), before or while it publishes its reports.

    The load trades against itself, so in the call each session soon has its 20 orders resting and
    the rest are rejected (a business answer, told once like any other): the call is kept short."""
    r = case.runner
    red = r.redis()
    _set_phase(case, PHASE_PRE_OPEN, "chaos: opening call")
    time.sleep(0.5)  # orders collect in the call: accepted, none filled
    before = r.count(r"run +\| restarted matcher")
    kill(r.pid("matcher"))
    wait_for(lambda: r.count(r"run +\| restarted matcher") > before, 30,
             "the matcher restarted (in the call)")
    uncross = _set_phase(case, PHASE_CONTINUOUS, "chaos: open")

    def applied() -> bool:
        for stream, entry in uncross.items():
            raw: Any = red.get(streams.applied_key(stream, streams.MATCHER_GROUP))
            done = raw.decode() if raw else "0-0"
            if tuple(map(int, done.split("-"))) < tuple(map(int, entry.split("-"))):
                return False
        return True

    wait_for(applied, 60, "the matcher applying the uncross")
    before = r.count(r"run +\| restarted matcher")
    mark(case.client)
    killed_at = kill(r.pid("matcher"))
    wait_for(lambda: r.count(r"run +\| restarted matcher") > before, 30,
             "the matcher restarted (the uncross)")
    wait_recovered(case, killed_at, opts.recover_timeout_s)
    case.saw.append("no disconnect; killed in the opening call and right after its uncross")


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


def fault_web(case: Case, opts: Options) -> None:
    """kill -9 of the web; the runner starts it again; the pages reconnect and resume by themselves."""
    r = case.runner
    before = r.count(r"run +\| restarted web")
    disconnects = case.client.disconnects()
    mark(case.client)
    killed_at = kill(r.pid("web"))
    wait_for(lambda: r.count(r"run +\| restarted web") > before, 60, "the web restarted")
    wait_recovered(case, killed_at, opts.recover_timeout_s)  # the FIX sessions never stopped
    fix_s = case.recover_s or 0.0
    pages = case.pages
    resumed = True
    if pages is not None:
        try:
            wait_for(pages.resumed_and_trading, opts.recover_timeout_s, "every page resumed and trading")
        except TimeoutError:
            resumed = False
        firsts = [s.first_fill_after_resume for s in pages.stats]
        if resumed and all(f is not None for f in firsts):
            case.recover_s = max(f or 0.0 for f in firsts) - killed_at
    lost_fix = case.client.disconnects() - disconnects
    case.extra_ok = lost_fix == 0 and resumed
    case.saw.append(("no disconnect" if lost_fix == 0 else f"{lost_fix} DISCONNECTS")
                    + f" (first New after the kill in {fix_s:.1f} s)"
                    + ("; time to recover: until every page resumed and got a fill again" if pages else ""))
    if not resumed:
        case.saw.append("PAGES DID NOT ALL RESUME AND TRADE")


def _web_status(r: Runner) -> dict[str, int]:
    got = httpx.get(f"http://127.0.0.1:{r.env['FIXLAB_WEB_PORT']}/api/status", timeout=5).json()
    return {k: v for k, v in got.get("web", {}).items() if isinstance(v, int)}


def _stalled_cut(r: Runner) -> int:
    total = 0
    for key in r.redis().scan_iter(match=streams.health_key("gateway", "*")):
        total += int(r.redis().hget(key, "stalled_readers_cut") or 0)
    return total


def fault_slow(case: Case, opts: Options) -> None:
    """A page that stops reading its WebSocket, a FIX session that stops reading its socket, and a
    market-data subscriber that never reads, while the load trades on."""
    r = case.runner
    rss0 = {"web": rss_mib(r.pid("web")), "gateway": rss_mib(r.pid("gateway"))}
    disconnects = case.client.disconnects()
    fills0 = case.pages.fills() if case.pages else 0
    mark(case.client)
    started = time.monotonic()
    page = StalledPage(f"ws://127.0.0.1:{r.env['FIXLAB_WEB_PORT']}/ws")
    deaf = DeafFix(r.fix_port, SLOW_COMP_IDS[0])
    md = DeafFix(r.fix_port, SLOW_COMP_IDS[1])
    try:
        md.subscribe()
        flood = threading.Thread(target=page.flood, name="chaos-stalled-page", daemon=True)
        flood.start()
        deaf.orders(2000)
        wait_recovered(case, started, opts.recover_timeout_s)  # the load trades on
        dropped_s = cut_s = None
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: _web_status(r).get("pages_dropped", 0) >= 1, 60, "the stalled page dropped")
            dropped_s = time.monotonic() - started
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: _stalled_cut(r) >= 1, 60, "the deaf FIX peer cut")
            cut_s = time.monotonic() - started
        traded = True
        if case.pages is not None:
            try:
                wait_for(lambda: case.pages is not None and case.pages.fills() > fills0, 30,
                         "the other pages trading")
            except TimeoutError:
                traded = False
        rss1 = {"web": rss_mib(r.pid("web")), "gateway": rss_mib(r.pid("gateway"))}
        status = _web_status(r)
        cut = _stalled_cut(r)
        md_unread = md.unread_bytes()
        deaf_closed, md_closed = deaf.cut(), md.cut()
    finally:
        page.close()
        deaf.close()
        md.close()
    lost_fix = case.client.disconnects() - disconnects
    done = [s for s in (dropped_s, cut_s) if s is not None]
    case.recover_s = max(done) if len(done) == 2 else None
    case.extra_ok = lost_fix == 0 and dropped_s is not None and cut_s is not None and deaf_closed and traded
    case.figures = {"rss_mib_before": rss0, "rss_mib_after": rss1,
                    "pages_dropped": status.get("pages_dropped"), "stalled_readers_cut": cut,
                    "page_dropped_after_s": dropped_s, "fix_peer_cut_after_s": cut_s,
                    "deaf_fix_closed": deaf_closed, "md_subscriber_closed": md_closed,
                    "md_subscriber_unread_bytes": md_unread,
                    "stall_s": r.env.get("FIXLAB_FIX_STALL_S")}
    case.saw.append(
        ("no disconnect" if lost_fix == 0 else f"{lost_fix} DISCONNECTS")
        + "; stalled page " + (f"dropped (1013) after {dropped_s:.1f} s" if dropped_s is not None
                               else "NOT DROPPED") + f" ({page.sent:,} pings sent)"
        + "; deaf FIX peer "
        + (f"cut after {cut_s:.1f} s" if cut_s is not None and deaf_closed else "NOT CUT")
        + f" (stalled_readers_cut {cut}, FIXLAB_FIX_STALL_S={r.env.get('FIXLAB_FIX_STALL_S', '30')})"
        + "; market-data subscriber that never reads " + ("cut too" if md_closed else
                                                         f"still connected, {md_unread:,} bytes unread")
        + f"; RSS MiB web {rss0['web']:g} -> {rss1['web']:g}, gateway {rss0['gateway']:g} -> "
        + f"{rss1['gateway']:g}; time to recover: until both were dealt with")
    if not traded:
        case.saw.append("THE OTHER PAGES DID NOT TRADE ON")


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
        try:
            rest = matcher_state(r.redis(), r.env)
        except MatcherBehind:  # the restarted matcher is still applying what it found
            return False
        return not any(s in case.comp_ids and s not in keep for s, _c in rest)

    try:
        wait_for(swept, opts.recover_timeout_s, "the ended sessions' orders cancelled")
    except TimeoutError:
        case.extra_ok = False
    case.recover_s = time.monotonic() - killed_at
    case.saw.append("disconnected for good (the client stopped); books read after the restart")


# Fault 9: a call book of its own on an instrument nobody else trades, big enough that its uncross
# takes a while (tens of milliseconds), from sessions of a gateway that does not exist (their
# reports go to an events stream only this fault reads), 20 orders each (the open-order limit).
UNCROSS_SYMBOL = "ELM.LAB"
UNCROSS_INSTRUMENTS = "ACORN.LAB:100.00,BIRCH.LAB:25.00,ELM.LAB:50.00"
UNCROSS_GATEWAY = "chaosinject"
UNCROSS_ORDERS = 20_000


def uncross_book(instrument: Instrument, n: int) -> list[NewOrder]:
    """``n`` limit orders 1% either side of the reference, one in ten At the Opening, 20 a session."""
    rnd = random.Random(9)
    ref = instrument.reference_ticks
    out = []
    for i in range(n):
        side = BUY if rnd.random() < 0.5 else SELL
        out.append(NewOrder(f"CHAOSUNX{i // 20:05d}", f"X{i}", instrument.symbol, side,
                            ref + rnd.randint(-ref // 100, ref // 100), rnd.randint(1, 100),
                            AT_OPEN if i % 10 == 0 else DAY, UNCROSS_GATEWAY, i % 20 + 1, 1 + i))
    return out


def _event_key(msg: Message) -> tuple[object, ...]:
    """What an event says about its order, without the ids the rest of the load moves on."""
    if isinstance(msg, Filled):
        return ("Filled", msg.clordid, msg.last_px, msg.last_qty, msg.leaves_qty)
    if isinstance(msg, Cancelled):
        return ("Cancelled", msg.clordid, msg.cum_qty)
    if isinstance(msg, Accepted):
        return ("Accepted", msg.clordid)
    return (type(msg).__name__, getattr(msg, "clordid", ""))


def _applied(red: Any, stream: str) -> str:
    raw: Any = red.get(streams.applied_key(stream, streams.MATCHER_GROUP))
    return raw.decode() if raw else "0-0"


def _at_or_after(a: str, b: str) -> bool:
    return tuple(map(int, a.split("-"))) >= tuple(map(int, b.split("-")))


def fault_matcher_uncross(case: Case, opts: Options) -> None:
    """Issue 31: kill -9 of the matcher while it applies an uncross: read, not yet published.

    A call book of UNCROSS_ORDERS orders on ELM.LAB (besides the load's call on ACORN.LAB), then the
    SetPhase that ends the call; the matcher is killed as soon as the consumer group shows the
    SetPhase delivered while the applied id is still before it. After the restart the auction's
    reports on the bus must be exactly those a replay of the same commands gives here: each fill
    and cancel once, none lost (``extra_ok``)."""
    r = case.runner
    red = r.redis()
    env = r.env
    instrument = next(i for i in common_settings({"REDIS_URL": "redis://unused", **env}).instruments
                      if i.symbol == UNCROSS_SYMBOL)
    stream = streams.orders_stream(instrument.shard)
    orders = uncross_book(instrument, UNCROSS_ORDERS)
    _set_phase(case, PHASE_PRE_OPEN, "chaos: opening call")
    last = ""
    for i in range(0, len(orders), 500):
        entry: Any = bus.publish(red, stream, orders[i:i + 500], 1_000_000)
        last = entry.decode() if isinstance(entry, bytes) else str(entry)
    wait_for(lambda: _at_or_after(_applied(red, stream), last), 120, "the matcher taking the call book")
    time.sleep(0.5)  # the load's orders collect in its own call meanwhile
    before = r.count(r"run +\| restarted matcher")
    pid = r.pid("matcher")
    mark(case.client)
    uncross = _set_phase(case, PHASE_CONTINUOUS, "chaos: open")[stream]
    killed_at = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        groups: Any = red.xinfo_groups(stream)
        delivered = next((g["last-delivered-id"] for g in groups
                          if g["name"] in (streams.MATCHER_GROUP, streams.MATCHER_GROUP.encode())), b"0-0")
        delivered = delivered.decode() if isinstance(delivered, bytes) else str(delivered)
        if _at_or_after(delivered, uncross):
            killed_at = kill(pid)
            break
    if killed_at is None:
        raise TimeoutError("the matcher never read the SetPhase that ends the call")
    mid = not _at_or_after(_applied(red, stream), uncross)
    case.figures["killed_mid_uncross"] = mid
    wait_for(lambda: r.count(r"run +\| restarted matcher") > before, 30, "the matcher restarted")
    wait_recovered(case, killed_at, opts.recover_timeout_s)
    wait_for(lambda: _at_or_after(_applied(red, stream), uncross), 120, "the restarted matcher's uncross")
    engine = Engine([instrument], limits=Limits(), id_prefix="x-")
    engine.apply(SetPhase("*", PHASE_PRE_OPEN, "", 1))
    for i in range(0, len(orders), 500):
        engine.apply_batch(orders[i:i + 500])
    want = Counter(_event_key(m) for m in engine.apply(SetPhase("*", PHASE_CONTINUOUS, "", 2))
                   if isinstance(m, (Filled, Cancelled)))
    events = streams.shard_events_stream(instrument.shard, UNCROSS_GATEWAY)
    got: Counter[tuple[object, ...]] = Counter()
    start = "-"
    while True:
        rows: Any = red.xrange(events, min=start, count=1000)
        if not rows:
            break
        for _id, fields in rows:
            got.update(_event_key(m) for m in decode_batch(fields[streams.BATCH_FIELD])
                       if isinstance(m, (Filled, Cancelled)))
        start = "(" + rows[-1][0].decode()
    case.figures["uncross_reports"] = sum(want.values())
    case.extra_ok = got == want
    missing, extra = want - got, got - want
    case.saw.append(f"no disconnect; killed {'while applying' if mid else 'just after'} the uncross of "
                    f"{UNCROSS_ORDERS} call orders: its {sum(want.values())} fills and cancels on the bus "
                    + ("exactly once" if case.extra_ok else
                       f"NOT exactly once ({sum(missing.values())} missing, {sum(extra.values())} extra)"))


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
    "web": ("5. web kill -9, runner restarts it", fault_web, {}),
    # A FIX peer that leaves 64 KiB unread is cut after 3 s here (30 s by default), so within the run;
    # three pages from one address (the default cap is 2).
    "slow": ("6. slow consumers (a page, a FIX session, a market-data subscriber stop reading)", fault_slow,
             {"FIXLAB_FIX_STALL_S": "3", "FIXLAB_PAGES_PER_ADDRESS": "4"}),
    "machine": ("7. every process kill -9, then make run", fault_machine, {}),
    "matcher-call": ("8. matcher kill -9 in an opening call and just after its uncross",
                     fault_matcher_call, {}),
    "matcher-uncross": ("9. matcher kill -9 while it applies the uncross of a 20,000-order call",
                        fault_matcher_uncross, {"FIXLAB_INSTRUMENTS": UNCROSS_INSTRUMENTS}),
}


def run_case(name: str, base: Path, opts: Options) -> Case:
    """Start a stack, run the load, inject ``name``'s fault, and tally what the clients saw."""
    title, inject, env = FAULTS[name]
    work = base / name
    work.mkdir(parents=True, exist_ok=True)
    comp_ids = [f"CHAOS{COMP_PREFIX[name]}{i:02d}" for i in range(1, opts.sessions + 1)]
    others = SLOW_COMP_IDS if name == "slow" else None
    (work / "sessions.cfg").write_text(sessions_file_text(comp_ids, others))
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
    pages = Pages(f"ws://127.0.0.1:{web_port}/ws", opts.pages) if opts.pages else None
    case = Case(name, title, runner, client, comp_ids, pages=pages)
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
        resting = _caught_up_state(runner)
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


def _caught_up_state(runner: Runner, timeout_s: float = 60) -> dict[tuple[str, str], int]:
    """``matcher_state`` once the matcher has applied its whole stream (it may still be catching up)."""
    state: dict[tuple[str, str], int] = {}

    def read() -> bool:
        try:
            state.update(matcher_state(runner.redis(), runner.env))
        except MatcherBehind:
            return False
        return True

    wait_for(read, timeout_s, "the matcher applying its whole stream")
    return state


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
            except MatcherBehind:
                pass
        time.sleep(0.1)
