"""The matcher service against a real redis-server: orders in, events out, snapshots, kill -9.

Every test compares what the service published with an in-process run of the same commands through
the engine: order events and trades must be exactly the same (no loss, no duplicate); Depth is
conflated per batch, so only the last one per book is compared.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from services.matcher.config import MatcherSettings, load
from services.matcher.engine import Engine, Limits
from services.matcher.service import MatcherService, RecoveryError
from shared import bus, streams
from shared.schema import (
    BUY,
    MASS_CANCEL_ALL,
    SELL,
    BookImage,
    BookUpdate,
    Cancelled,
    Depth,
    ImageRequest,
    MassCancel,
    MassCancelReport,
    Message,
    NewOrder,
    StatusReport,
    StatusRequest,
    Trade,
    decode,
    decode_batch,
)
from tests.helpers import eventually
from tests.unit.test_matcher_engine import Client, random_commands
from tests.unit.test_matcher_market_data import Mirror, book_levels

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ORDERS = streams.orders_stream("0")
MARKET = streams.shard_market_stream("0")
DEADLETTERS = streams.shard_deadletter_stream("0")


def events_of(gateway_id: str) -> str:
    """Shard 0's events stream for a gateway."""
    return streams.shard_events_stream("0", gateway_id)


def env_for(url: str, **extra: str) -> dict[str, str]:
    return {"REDIS_URL": url, "FIXLAB_PRO_RATA": "BIRCH.LAB", "FIXLAB_MATCHER_BLOCK_MS": "50",
            "FIXLAB_MATCHER_HEALTH_SECONDS": "0.2", **extra}


def settings_for(url: str, **extra: str) -> MatcherSettings:
    return load(env_for(url, **extra))


def write(r: redis.Redis, cmds: list[Message], per_entry: int = 20) -> list[bytes]:
    pipe = r.pipeline(transaction=False)
    for i in range(0, len(cmds), per_entry):
        bus.publish(pipe, ORDERS, cmds[i:i + per_entry], 1_000_000)
    return list(pipe.execute())


def read_all(r: redis.Redis, stream: str) -> list[Message]:
    rows: Any = r.xrange(stream)
    return [m for _, fields_ in rows for m in decode_batch(fields_[streams.BATCH_FIELD])]


def expected(settings: MatcherSettings, cmds: list[Message]) -> tuple[dict[str, list[Message]], Engine]:
    engine = Engine(settings.instruments, limits=Limits(), id_prefix="0-")
    out: dict[str, list[Message]] = {}
    result = engine.apply_batch(cmds)
    for (dest, _), msg in zip(result.events, result.messages(), strict=True):
        out.setdefault(MARKET if dest is None else events_of(dest), []).append(msg)
    return out, engine


def assert_same_as_in_process(r: redis.Redis, settings: MatcherSettings, cmds: list[Message]) -> None:
    want, engine = expected(settings, cmds)
    for stream, msgs in want.items():
        got = read_all(r, stream)
        if stream == MARKET:
            assert [m for m in got if isinstance(m, Trade)] == [m for m in msgs if isinstance(m, Trade)]
            last_depth = {m.symbol: m for m in got if isinstance(m, Depth)}
            for symbol, depth in last_depth.items():
                assert (depth.bids, depth.asks) == engine.books[symbol].depth(10)
        else:
            assert len(got) == len(msgs), stream
            assert got == msgs, stream


def applied(r: redis.Redis) -> str:
    raw: Any = r.get(streams.applied_key(ORDERS, streams.MATCHER_GROUP))
    return raw.decode() if raw else "0-0"


class Running:
    """A MatcherService on a thread of this test."""

    def __init__(self, settings: MatcherSettings) -> None:
        self.service = MatcherService(settings)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.service.run(self.stop)
        except BaseException as exc:  # surfaced by close()
            self.error = exc

    def __enter__(self) -> MatcherService:
        self.thread.start()
        return self.service

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


def test_orders_in_events_out(redis_url: str) -> None:
    r = bus.connect(redis_url)
    settings = settings_for(redis_url)
    cmds = random_commands(11, 1500)
    ids = write(r, cmds)
    with Running(settings) as service:
        eventually(lambda: applied(r) == ids[-1].decode(), timeout=30, what="all entries applied")

        def reported() -> dict[bytes, bytes]:
            # A report can fall between a batch's apply and its XACK (acknowledged once its effects
            # are published), so wait for one that has every command and nothing pending.
            health: Any = r.hgetall(streams.health_key("matcher", "0"))
            done = health and int(health[b"commands"]) == len(cmds) and health.get(b"pending") == b"0"
            return health if done else {}

        health = eventually(reported, what="health report of every command, none pending")
        assert int(health[b"resting_orders"]) == service.engine.resting_orders > 0
    assert_same_as_in_process(r, settings, cmds)
    assert r.xpending(ORDERS, streams.MATCHER_GROUP)["pending"] == 0
    # One entry per destination per batch: far fewer entries than events.
    assert r.xlen(events_of("gw0")) < len(read_all(r, events_of("gw0"))) / 5


def test_status_mass_cancel_and_market_data_through_redis_across_a_restart(redis_url: str) -> None:
    r = bus.connect(redis_url)
    settings = settings_for(redis_url, FIXLAB_MATCHER_BATCH="2")
    a, b, c = Client("A", "gw0"), Client("B", "gw0"), Client("C", "gw0")
    first: list[Message] = [a.new(BUY, 9990, 5), a.new(SELL, 10010, 2), b.new(BUY, 9980, 1),
                            a.new(BUY, 2490, 3, symbol="BIRCH.LAB"), ImageRequest("gw0", 5),
                            b.new(BUY, 9990, 4)]
    ids = write(r, first, per_entry=2)
    with Running(settings):
        eventually(lambda: applied(r) == ids[-1].decode(), timeout=30, what="first part applied")
    second: list[Message] = [StatusRequest("A", "A-1", "", "ACORN.LAB", BUY, "q1", "gw0", 90, 90),
                             MassCancel("A", "mc", MASS_CANCEL_ALL, "", 0, "gw0", 91, 91),
                             c.new(SELL, 9980, 3)]
    ids += write(r, second, per_entry=1)
    with Running(settings) as service:  # the second part after a restart from the clean-stop snapshot
        eventually(lambda: applied(r) == ids[-1].decode(), timeout=30, what="second part applied")
    events = read_all(r, events_of("gw0"))
    [status] = [m for m in events if isinstance(m, StatusReport)]
    assert (status.clordid, status.order_id, status.status, status.leaves_qty, status.req_id) == (
        "A-1", "0-1", 0, 5, "q1")
    i = next(k for k, m in enumerate(events) if isinstance(m, MassCancelReport))
    head, cancels = events[i], events[i + 1:i + 4]
    assert isinstance(head, MassCancelReport) and (head.response, head.affected) == (MASS_CANCEL_ALL, 3)
    assert [(m.clordid, m.text) for m in cancels if isinstance(m, Cancelled)] == [
        ("A-1", "mass cancel"), ("A-2", "mass cancel"), ("A-3", "mass cancel")]
    # A subscriber from the image on, through the restart, holds exactly the books.
    market = read_all(r, MARKET)
    start = next(k for k, m in enumerate(market) if isinstance(m, BookImage))
    assert any(isinstance(m, BookUpdate) for m in market[start:])
    mirror = Mirror()
    mirror.take(market[start:])
    for symbol in ("ACORN.LAB", "BIRCH.LAB"):
        assert mirror.books[symbol] == book_levels(service.engine, symbol)
    # B's 4 at 99.90 less the 3 C sold, B's 1 at 99.80; A's orders all cancelled.
    assert mirror.books == {"ACORN.LAB": {(BUY, 9990): (1, 1), (BUY, 9980): (1, 1)}, "BIRCH.LAB": {}}
    assert_same_as_in_process(r, settings, first + second)


def test_bad_entries_and_malformed_commands_go_to_dead_letters(redis_url: str) -> None:
    r = bus.connect(redis_url)
    settings = settings_for(redis_url)
    a = Client("A", "gw0")
    good = [a.new(1, 9990, 1), a.new(2, 10010, 1)]
    r.xadd(ORDERS, {streams.BATCH_FIELD: b"\xc1 not msgpack"})
    ids = write(r, [good[0], NewOrder("A", "x", "ACORN.LAB", 1, "99.9", 1, 0, "gw0", 9, 9),  # type: ignore[arg-type]
                    Trade("ACORN.LAB", 1, 1, "M", 1, 1)], per_entry=3)
    ids += write(r, [good[1]])
    with Running(settings):
        eventually(lambda: applied(r) == ids[-1].decode(), what="entries applied")
    assert_same_as_in_process(r, settings, good)
    assert not r.exists(streams.DEADLETTER_STREAM)  # the shard's own, in its slot
    dead: Any = r.xrange(DEADLETTERS)
    reasons = sorted(fields_[b"reason"].decode() for _, fields_ in dead)
    assert len(reasons) == 3
    assert "NewOrder.price='99.9' is not an integer" in reasons
    assert "Trade is not a matcher command" in reasons


def test_clean_restart_continues_from_the_final_snapshot(redis_url: str) -> None:
    r = bus.connect(redis_url)
    settings = settings_for(redis_url, FIXLAB_MATCHER_SNAPSHOT_EVERY="200", FIXLAB_MATCHER_BATCH="3")
    cmds = random_commands(12, 3000)
    ids = write(r, cmds[:1800])
    with Running(settings):
        eventually(lambda: applied(r) == ids[-1].decode(), timeout=30, what="first part applied")
    snap = decode(r.get(streams.snapshot_key("0")))  # type: ignore[arg-type]
    assert snap.last_id == ids[-1].decode()  # type: ignore[attr-defined]  # the clean stop stored one
    assert r.xlen(ORDERS) < len(ids)  # trimmed below the snapshot
    ids += write(r, cmds[1800:])
    with Running(settings) as service:
        eventually(lambda: applied(r) == ids[-1].decode(), timeout=30, what="second part applied")
    assert service.replayed == 0
    assert_same_as_in_process(r, settings, cmds)


def test_entries_handed_out_again_stop_the_matcher(redis_url: str) -> None:
    # What Redis does after losing acknowledged writes (a crash between fsyncs): it hands out
    # entries the matcher already applied. The matcher must not dedupe them into silence.
    r = bus.connect(redis_url)
    settings = settings_for(redis_url)
    ids = write(r, random_commands(16, 200))
    running = Running(settings)
    with pytest.raises(RecoveryError, match="again"), running:
        eventually(lambda: applied(r) == ids[-1].decode(), what="entries applied")
        r.xgroup_setid(ORDERS, streams.MATCHER_GROUP, "0")
        eventually(lambda: not running.thread.is_alive(), what="the matcher stopping")
    assert r.get(streams.matcher_lease_key("0")) is None


def test_a_lost_consumer_group_does_not_replay_applied_entries(redis_url: str) -> None:
    r = bus.connect(redis_url)
    settings = settings_for(redis_url)
    cmds = random_commands(17, 1200)
    ids = write(r, cmds[:600])
    with Running(settings):
        eventually(lambda: applied(r) == ids[-1].decode(), what="first part applied")
    r.xgroup_destroy(ORDERS, streams.MATCHER_GROUP)
    ids += write(r, cmds[600:])
    with Running(settings):
        eventually(lambda: applied(r) == ids[-1].decode(), what="second part applied")
    assert_same_as_in_process(r, settings, cmds)


def test_a_corrupt_snapshot_is_refused(redis_url: str) -> None:
    r = bus.connect(redis_url)
    r.set(streams.snapshot_key("0"), b"\x93not a snapshot")
    with pytest.raises(RecoveryError, match="cannot be restored"):
        MatcherService(settings_for(redis_url)).recover()


def run_without_final_snapshot(settings: MatcherSettings, last_id: bytes) -> MatcherService:
    """Consume up to ``last_id`` and stop without the clean-stop snapshot (as a crash would)."""
    service = MatcherService(settings)
    service.recover()
    stop = threading.Event()

    def handle(batch: list[bus.Entry]) -> bus.Effects:
        if batch[-1][0] == last_id:
            stop.set()
        return service.handle(batch)

    service.consumer.run(handle, stop)
    return service


def test_replay_rebuilds_the_same_state(redis_url: str) -> None:
    r = bus.connect(redis_url)
    settings = settings_for(redis_url, FIXLAB_MATCHER_SNAPSHOT_EVERY="700", FIXLAB_MATCHER_BATCH="2",
                            FIXLAB_MATCHER_SNAPSHOT_SECONDS="1000")
    ids = write(r, random_commands(15, 2000), per_entry=10)
    first = run_without_final_snapshot(settings, ids[-1])
    snap = decode(r.get(streams.snapshot_key("0")))  # type: ignore[arg-type]
    assert snap.last_id != ids[-1].decode()  # type: ignore[attr-defined]  # entries after it to replay
    again = MatcherService(settings)
    again.recover()
    assert again.replayed > 0
    assert again.engine.snapshot("0", "x", 0) == first.engine.snapshot("0", "x", 0)


def test_recovery_refuses_a_stream_trimmed_past_the_snapshot(redis_url: str) -> None:
    r = bus.connect(redis_url)
    settings = settings_for(redis_url, FIXLAB_MATCHER_SNAPSHOT_EVERY="1000000",
                            FIXLAB_MATCHER_SNAPSHOT_SECONDS="1000")
    ids = write(r, random_commands(13, 400))
    run_without_final_snapshot(settings, ids[-1])
    r.xtrim(ORDERS, minid=ids[5], approximate=False)  # someone else trimmed acknowledged entries
    with pytest.raises(RecoveryError, match="trimmed"):
        MatcherService(settings).recover()


# --------------------------------------------------------------------------- kill -9

class MatcherProcess:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "services.matcher"], cwd=ROOT, env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def kill(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, "the matcher died by itself"
        self.proc.kill()
        self.proc.wait(10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(15)
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read().decode()
        self.proc.stderr.close()
        return code

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and self.proc.stderr is not None and not self.proc.stderr.closed:
            self.proc.stderr.close()


@pytest.fixture
def matcher_process(redis_url: str) -> Iterator[MatcherProcess]:
    proc = MatcherProcess(env_for(redis_url, FIXLAB_MATCHER_SNAPSHOT_EVERY="250", FIXLAB_MATCHER_BATCH="4"))
    try:
        yield proc
    finally:
        proc.cleanup()


def test_kill_9_mid_stream_loses_and_duplicates_nothing(redis_url: str,
                                                        matcher_process: MatcherProcess) -> None:
    r = bus.connect(redis_url)
    settings = settings_for(redis_url)
    cmds = random_commands(14, 6000)
    # A producer that retried its write: some entries appear twice in the stream.
    entries = [cmds[i:i + 20] for i in range(0, len(cmds), 20)]
    entries = [e for k, e in enumerate(entries) for _ in range(2 if k % 17 == 3 else 1)]
    writes: list[bytes] = []
    pipe = r.pipeline(transaction=False)
    for e in entries[:150]:
        bus.publish(pipe, ORDERS, e, 1_000_000)
    writes += pipe.execute()

    def entries_applied() -> int:
        done = applied(r).encode()
        return writes.index(done) + 1 if done in writes else 0

    replayed = []

    def start() -> None:
        matcher_process.start()
        pid = str(matcher_process.proc.pid).encode()  # type: ignore[union-attr]

        def health() -> dict[bytes, bytes]:
            h: Any = r.hgetall(streams.health_key("matcher", "0"))
            return h if h.get(b"pid") == pid else {}

        replayed.append(int(eventually(health, timeout=30, what="the new matcher reporting")[b"replayed"]))

    def past_its_snapshot() -> bool:
        """Entries applied since the last snapshot: a restart now must replay them."""
        blob: Any = r.get(streams.snapshot_key("0"))
        return blob is None or decode(blob).last_id != applied(r)

    def all_applied() -> bool:
        return entries_applied() == len(writes)

    start()
    for k, threshold in enumerate((20, 60, 110)):
        # Kill as soon as the matcher has got past an entry: it is mid-batch or mid-commit. Past its
        # snapshot too, or a slow machine can kill it just after each snapshot and nothing is replayed.
        # (Unless it has applied everything and snapshotted that: then there is nothing to wait for.)
        eventually(lambda t=threshold: entries_applied() >= t  # type: ignore[misc]
                   and (past_its_snapshot() or all_applied()),
                   timeout=60, what=f"matcher past entry {threshold} and its last snapshot")
        matcher_process.kill()
        if k == 1:  # more commands arrive while it is down
            pipe = r.pipeline(transaction=False)
            for e in entries[150:]:
                bus.publish(pipe, ORDERS, e, 1_000_000)
            writes += pipe.execute()
        start()
    eventually(lambda: applied(r) == writes[-1].decode(), timeout=60, what="every entry applied")
    assert matcher_process.stop() == 0, matcher_process.stderr
    assert sum(replayed) > 0  # at least one restart rebuilt from a snapshot plus acknowledged entries
    all_cmds: list[Message] = [m for e in entries for m in e]
    assert_same_as_in_process(r, settings, all_cmds)
    assert r.xlen(ORDERS) < len(writes)  # snapshots trimmed the stream
    events = [m for gw in ("gw0", "gw1") for m in read_all(r, events_of(gw))]
    exec_ids = [m.exec_id for m in events if hasattr(m, "exec_id")]
    assert len(exec_ids) == len(set(exec_ids)) > 5000


def test_kill_9_during_a_call_and_its_uncross_loses_and_duplicates_nothing(
        redis_url: str, matcher_process: MatcherProcess) -> None:
    """Issue 31: phases, the call book, market orders and stops across kill -9 of the matcher, once
    while orders collect in a call and once just after the uncross is written."""
    import random

    from shared.schema import (
        PHASE_CONTINUOUS,
        PHASE_HALTED,
        PHASE_PRE_OPEN,
        Indicative,
        PhaseChanged,
        SetPhase,
    )
    from tests.unit.test_matcher_phases import day

    r = bus.connect(redis_url)
    settings = settings_for(redis_url)
    orders = [c for c in day(random.Random(31), 900) if not isinstance(c, SetPhase)]
    call: list[Message] = [SetPhase("*", PHASE_PRE_OPEN, "open call", 1), *orders[:400]]
    rest: list[Message] = [SetPhase("*", PHASE_CONTINUOUS, "open", 2), *orders[400:600],
                           SetPhase("ACORN.LAB", PHASE_HALTED, "halt", 3), *orders[600:],
                           SetPhase("ACORN.LAB", PHASE_CONTINUOUS, "resume", 4)]
    writes = write(r, call, per_entry=10)
    matcher_process.start()
    eventually(lambda: applied(r).encode() in writes[len(writes) // 2:], timeout=60, what="mid-call")
    matcher_process.kill()
    writes += write(r, rest[:1], per_entry=1)  # the uncross, then kill as soon as it is applied
    matcher_process.start()
    eventually(lambda: applied(r) == writes[-1].decode(), timeout=60, what="the uncross applied")
    matcher_process.kill()
    writes += write(r, rest[1:], per_entry=10)
    matcher_process.start()
    eventually(lambda: applied(r) == writes[-1].decode(), timeout=60, what="every entry applied")
    assert matcher_process.stop() == 0, matcher_process.stderr
    assert_same_as_in_process(r, settings, call + rest)
    want, _ = expected(settings, call + rest)
    got = read_all(r, MARKET)
    phases = [m for m in want[MARKET] if isinstance(m, PhaseChanged)]
    assert [m for m in got if isinstance(m, PhaseChanged)] == phases
    # Indicatives are per batch (the service's batches are smaller than the one in-process): none told
    # twice, and each book ends on the same one.
    for symbol in ("ACORN.LAB", "BIRCH.LAB"):
        mine = [m for m in got if isinstance(m, Indicative) and m.symbol == symbol]
        assert len(mine) > 2 and len(set(mine)) == len(mine)
        told = [(m.price, m.volume, m.imbalance_qty, m.imbalance_side) for m in mine]
        last = [m for m in want[MARKET] if isinstance(m, Indicative) and m.symbol == symbol][-1]
        assert told[-1] == (last.price, last.volume, last.imbalance_qty, last.imbalance_side)
    assert any(isinstance(m, Trade) and m.aggressor_side == 0 for m in got)  # an uncross traded
