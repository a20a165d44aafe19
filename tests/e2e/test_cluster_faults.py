"""kill -9 of one matcher shard mid-run, on a real Redis Cluster (issue 16).

Three masters started here (shared.redis_cluster.LocalCluster), then the runner (``python -m
services``) on them with two matcher shards (ACORN.LAB on a, BIRCH.LAB on b), one gateway, bots off.
Strict QuickFIX initiators (the stock FIX44.xml, benchmarks/chaos/client.py) send a steady flow on
both instruments: orders at the mid that trade with each other, and GTC orders away from it that stay
in the books. Once shard a's snapshot holds resting orders of the test and another rested after it
(so a restart must both restore and replay), and before its next snapshot is due, its matcher is
killed with SIGKILL; the runner starts it again, and it recovers from its snapshot plus the
acknowledged entries after it.

Asserted: while shard a is down, BIRCH.LAB orders sent after the kill are acknowledged and trade;
ACORN.LAB orders sent meanwhile wait and are acknowledged once it is back (none rejected). At the
end every order got exactly one New, no ExecID reached a client twice, each trade's SecondaryExecID
(527) is on exactly two fills (a buy and a sell of the same quantity and price), the ledger tallies
with both shards' books and events (benchmarks/chaos/ledger.py: nothing lost, duplicated,
unreported or unanswered), the orders resting on shard a before the kill are still there (the
recovered matcher answers an OrderStatusRequest for each: New, nothing filled), the restarted matcher
replayed entries (its recovery line and its health hash), and no client sent a session Reject.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import signal
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from redis.cluster import ClusterNode, RedisCluster

from benchmarks.chaos.client import ChaosClient
from benchmarks.chaos.faults import mark, recovered
from benchmarks.chaos.ledger import Ledger, tally
from benchmarks.chaos.stack import MatcherBehind, matcher_state, terminal_events
from shared import streams
from shared.redis_cluster import LocalCluster
from shared.redis_server import free_port
from shared.schema import MatcherSnapshot, decode, decode_batch
from tests.e2e.runner_process import Runner, alive, runner
from tests.helpers import eventually
from tests.stock_client import raw

pytestmark = [pytest.mark.xdist_group("faults"), pytest.mark.e2e, pytest.mark.timeout(600)]

if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
    pytest.skip("redis-server and redis-cli are needed to build a cluster", allow_module_level=True)

SHARDS = "ACORN.LAB:a,BIRCH.LAB:b"
GATEWAY = "gw1"
SNAPSHOT_EVERY = 100  # commands between shard snapshots: a few seconds of this test's flow
REST_EVERY, REST_MAX = 10, 10  # every 10th order of a session rests away from the mid, 10 per session
AFTER = 60  # orders each ACORN.LAB session gets acknowledged after the kill before the load stops


class RecordingLedger(Ledger):
    """The chaos ledger, also keeping every ExecutionReport with the moment it arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, dict[int, str]]] = []

    def report(self, fields: Mapping[int, str]) -> None:
        self.seen.append((time.monotonic(), dict(fields)))
        super().report(fields)


def _client(port: int, comps: list[str], tag: str, symbol: str, mid: str, low: str, high: str,
            store: Path) -> ChaosClient:
    c = ChaosClient("127.0.0.1", port, comps, run_tag=tag, window=4, store_dir=store, symbol=symbol,
                    mid=mid, low=low, high=high, rest_every=REST_EVERY, rest_max=REST_MAX)
    c.ledger = RecordingLedger()
    return c


def _seen(c: ChaosClient) -> list[tuple[float, dict[int, str]]]:
    ledger = c.ledger
    assert isinstance(ledger, RecordingLedger)
    return list(ledger.seen)


def _number(clordid: str) -> int:
    return int(clordid.rpartition("-")[2])


def _resting_acknowledged(c: ChaosClient) -> set[str]:
    """The orders of ``c`` sent to rest away from the mid that are acknowledged and unfilled."""
    return {k for k, v in list(c.ledger.orders.items())
            if _number(k) % REST_EVERY == REST_EVERY - 1 and _number(k) // REST_EVERY < REST_MAX
            and v.news and not v.fills and not v.cancelled}


def _shard_a(rc: RedisCluster) -> tuple[set[str], int, int] | None:
    """Shard a's latest snapshot: (the ClOrdIDs resting in it, entries and commands applied after
    it); None before its first one."""
    blob: Any = rc.get(streams.snapshot_key("a"))
    if blob is None:
        return None
    snap = decode(blob)
    assert isinstance(snap, MatcherSnapshot)
    held = {o[2] for o in snap.orders}
    stream = streams.orders_stream("a")
    applied: Any = rc.get(streams.applied_key(stream, streams.MATCHER_GROUP))
    if applied is None or applied.decode() == snap.last_id:
        return held, 0, 0
    rows: Any = rc.xrange(stream, min=f"({snap.last_id}", max=applied.decode())
    return held, len(rows), sum(len(decode_batch(f[streams.BATCH_FIELD])) for _id, f in rows)


def _settled(clients: list[ChaosClient], rc: RedisCluster, env: Mapping[str, str], quiet_s: float = 2.0
             ) -> dict[str, int]:
    """Wait until no report arrived for ``quiet_s`` and both shards applied their whole streams;
    return every resting order's ClOrdID -> quantity filled."""
    state: dict[str, int] = {}
    last = (-1, time.monotonic())
    plain: Any = rc  # the chaos helpers' single-key reads, on the cluster client

    def check() -> bool:
        nonlocal last
        n = sum(len(_seen(c)) for c in clients)
        if n != last[0]:
            last = (n, time.monotonic())
            return False
        if time.monotonic() - last[1] < quiet_s:
            return False
        try:
            for shard in ("a", "b"):
                got = matcher_state(plain, dict(env), shard)
                state.update({k: cum for (_s, k), cum in got.items()})
        except MatcherBehind:
            return False
        return True

    eventually(check, timeout=120, interval=0.1, what="every report in and both shards caught up")
    return state


def _status(client: ChaosClient, comp: str, clordid: str, symbol: str, side: str) -> None:
    """An OrderStatusRequest on ``comp``'s session of ``client``: through its own initiator, not
    QuickFIX's registry, where an earlier test's session of the same CompID may still sit."""
    body: list[tuple[int, object]] = [(11, clordid), (55, symbol), (54, side)]
    assert client.send_message(comp, raw(comp, body, "H"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cluster"), masters=3) as local:
        yield local


def test_kill_9_of_one_matcher_shard_mid_run(cluster: LocalCluster, tmp_path: Path) -> None:
    fix_port, web_port = free_port(), free_port()
    env = {"REDIS_URL": cluster.url, "FIXLAB_SHARDS": SHARDS, "FIXLAB_BOTS": "0",
           "FIXLAB_RUN_DIR": str(tmp_path / "run"), "FIXLAB_FIX_PORT": str(fix_port),
           "FIXLAB_WEB_PORT": str(web_port), "FIXLAB_GATEWAY_ID": GATEWAY,
           "FIXLAB_MATCHER_SNAPSHOT_EVERY": str(SNAPSHOT_EVERY), "FIXLAB_MATCHER_SNAPSHOT_SECONDS": "3600",
           "FIXLAB_MATCHER_HEALTH_SECONDS": "0.5",
           # Far from now: no trading day ends during the run.
           "FIXLAB_END_OF_DAY": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=12)).strftime("%H:%M")}
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", cluster.first_port)])
    acorn = _client(fix_port, ["CLIENT01", "CLIENT02"], "ac", "ACORN.LAB", "100.00", "99.00", "101.00",
                    tmp_path / "store-acorn")
    birch = _client(fix_port, ["CLIENT03", "CLIENT04"], "bi", "BIRCH.LAB", "25.00", "24.00", "26.00",
                    tmp_path / "store-birch")
    clients = [acorn, birch]
    started: list[ChaosClient] = []
    try:
        with runner(env) as run:
            run.wait_line(rf"gateway {GATEWAY} ready on port {fix_port}", timeout=120)
            for c in clients:
                c.start()
                started.append(c)
                c.send(True)
            _the_fault_and_what_it_left(run, rc, env, acorn, birch)
            for c in started:
                c.stop()
            started.clear()
            assert [x for x in run.lines if "Traceback" in x or "level=error" in x] == []
    finally:
        for c in started:
            c.stop()
        rc.close()


def _the_fault_and_what_it_left(run: Runner, rc: RedisCluster, env: Mapping[str, str],
                                acorn: ChaosClient, birch: ChaosClient) -> None:
    clients = [acorn, birch]
    # Resting orders in both books, and shard a past a snapshot of its own with room before its next
    # one: a restart now must replay what it applied since (and nothing can snapshot it away between
    # this check and the kill: ACORN.LAB's flow is paused for it; BIRCH.LAB's runs on, on shard b).
    eventually(lambda: len(_resting_acknowledged(acorn)) >= 4 and len(_resting_acknowledged(birch)) >= 4,
               timeout=120, what="resting orders acknowledged on both books")

    split: list[set[str]] = []

    def past_a_snapshot() -> bool:
        """Resting orders both in shard a's snapshot and acknowledged after it (so the restart must
        restore some and replay others), with room before the next snapshot."""
        got = _shard_a(rc)
        if got is None:
            return False
        held, entries, commands = got
        rest = _resting_acknowledged(acorn)
        if entries >= 1 and commands <= SNAPSHOT_EVERY // 2 and len(rest & held) >= 2 and rest - held:
            split[:] = [rest & held, rest - held]
            return True
        return False

    def quiet_past_a_snapshot() -> bool:
        """past_a_snapshot with ACORN.LAB's flow paused and every order of it answered, so nothing
        can move shard a to its next snapshot before the kill. (With the flow on, the few commands of
        room ran out between the check and the kill on a loaded machine: shard a snapshotted again
        and the restart had nothing to replay.)"""
        if not past_a_snapshot():
            return False
        acorn.send(False)
        eventually(lambda: all(not d.outstanding for d in acorn.drivers.values()), timeout=60,
                   what="every ACORN.LAB order answered")
        if past_a_snapshot():
            return True
        acorn.send(True)
        return False

    eventually(quiet_past_a_snapshot, timeout=180, interval=0.005,
               what="shard a past a snapshot, with resting orders in it and after it")
    pid = run.started_pids()["matcher-a"][-1]
    pid_b = run.started_pids()["matcher-b"][-1]
    resting_before = split[0] | split[1]
    birch_resting_before = _resting_acknowledged(birch)
    before_restart = len([x for x in run.lines if re.match(r"run +\| restarted matcher-a ", x)])
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    # From now on: a New for an order numbered from here is an order sent after the kill.
    mark(acorn)
    mark(birch)
    marks = {d.tag: d.mark or 0 for c in clients for d in c.drivers.values()}
    acorn.send(True)  # ACORN.LAB orders sent from now on wait for the new matcher

    def after_kill(clordid: str) -> bool:
        tag, _, number = clordid.rpartition("-")
        return tag in marks and int(number) >= marks[tag]

    def restart_line() -> int:
        """1 + the index of the runner's line saying it restarted matcher-a, or 0."""
        hits = [i for i, x in enumerate(list(run.lines)) if re.match(r"run +\| restarted matcher-a ", x)]
        return hits[before_restart] + 1 if len(hits) > before_restart else 0

    at = eventually(restart_line, timeout=60, what="the runner restarting matcher-a") - 1
    restarted_at = run.times[at]
    new_pid = int(re.findall(r"\(pid (\d+)\)", run.lines[at])[0])
    assert new_pid != pid and not alive(pid)
    # Shard a is back when an ACORN.LAB order sent after the kill is acknowledged: not before the
    # runner started the new matcher (those orders waited), and none of them was refused.
    eventually(lambda: recovered(acorn), timeout=120, what="ACORN.LAB orders acknowledged again")
    back_at = min(t for t, f in _seen(acorn) if after_kill(f.get(11, "")))
    assert back_at > restarted_at > killed_at
    outage = back_at - killed_at
    # ACORN.LAB orders sent before the kill that the dead matcher had not answered (read or not):
    # counted for the report, not asserted (the kill may land when every one had been answered).
    in_flight = {f[11] for t, f in _seen(acorn) if f.get(150) == "0" and t > restarted_at
                 and not after_kill(f[11])}

    # During the outage shard b acknowledged orders sent after the kill and traded them.
    in_outage = [f for t, f in _seen(birch) if killed_at < t < back_at and after_kill(f.get(11, ""))]
    birch_news = [f for f in in_outage if f.get(150) == "0"]
    birch_fills = [f for f in in_outage if f.get(150) == "F"]
    assert len(birch_news) >= 5 and birch_fills, (outage, len(birch_news), len(birch_fills))
    assert run.started_pids()["matcher-b"] == [pid_b]  # shard b's matcher was never touched

    # The restarted matcher replayed what it applied after its snapshot (its log line and health).
    line = eventually(lambda: next((m for x in run.lines[at:] if (m := re.search(
        r"recovered shard a: snapshot at ([\d-]+), replayed (\d+) entries", x))), None),
        timeout=30, what="the new matcher's recovery line")
    assert line is not None
    assert int(line.group(2)) > 0 and line.group(1) != "0-0", line.group(0)

    def health() -> dict[bytes, bytes]:
        h: Any = rc.hgetall(streams.health_key("matcher", "a"))
        return h if h.get(b"pid") == str(new_pid).encode() else {}

    assert int(eventually(health, timeout=30, what="the new matcher's health")[b"replayed"]) > 0

    # More load after the recovery, then everything in.
    def enough_after() -> bool:
        return all(sum(1 for k, v in list(acorn.ledger.orders.items()) if k.startswith(d.tag + "-")
                       and after_kill(k) and v.news) >= AFTER for d in acorn.drivers.values())

    eventually(enough_after, timeout=180, what=f"{AFTER} ACORN.LAB orders per session after the kill")
    for c in clients:
        c.send(False)
    _settled(clients, rc, env)

    # The orders resting on shard a before the kill are still in its book: the recovered matcher's
    # answer to an OrderStatusRequest for each (150=I, New, nothing filled).
    comps = {d.tag: d.comp_id for d in acorn.drivers.values()}
    side = {f[11]: f[54] for _t, f in _seen(acorn) if f.get(150) == "0"}
    for clordid in sorted(resting_before):
        _status(acorn, comps[clordid.rpartition("-")[0]], clordid, "ACORN.LAB", side[clordid])
    for clordid in sorted(resting_before):
        status = eventually(lambda k=clordid: next((f for _t, f in _seen(acorn)  # type: ignore[misc]
                                                   if f.get(11) == k and f.get(150) == "I"), None),
                            timeout=30, what=f"the status of {clordid}")
        assert status is not None
        assert (status.get(39), status.get(14), status.get(151)) == ("0", "0", "1"), status
    resting = _settled(clients, rc, env)
    assert resting_before <= {k for k, cum in resting.items() if cum == 0}
    assert birch_resting_before <= {k for k, cum in resting.items() if cum == 0}

    plain: Any = rc  # the chaos helpers' single-key reads, on the cluster client
    done = terminal_events(plain, GATEWAY, ("a", "b"))
    for c in clients:
        orders = dict(c.ledger.orders)
        t = tally(orders, {k: v for k, v in resting.items() if k.partition("-")[0] in c.by_tag}, done)
        assert (t.lost, t.duplicated, t.unreported, t.redelivered, t.unanswered, t.unconfirmed,
                t.rejected) == (0, 0, 0, 0, 0, 0, 0), t
        assert t.sent > AFTER and t.filled > 0 and t.resting >= len(resting_before), t
        # Every order exactly one New; no ExecID twice to a client.
        assert all(len(v.news) == 1 and not v.rejected for v in orders.values())
        exec_ids = [f[17] for _t, f in _seen(c) if f.get(150) != "I"]  # a status report's ExecID is 0
        assert len(exec_ids) == len(set(exec_ids))
        assert c.app.rejects_sent == 0 and c.app.errors == 0 and c.ledger.stray == 0
    # Each trade is on exactly two fills: a buy and a sell of one symbol, quantity and price.
    fills = [f for c in clients for _t, f in _seen(c) if f.get(150) == "F"]
    by_match: dict[str, list[dict[int, str]]] = {}
    for f in fills:
        by_match.setdefault(f[527], []).append(f)
    assert Counter(len(v) for v in by_match.values()) == Counter({2: len(by_match)})
    for pair in by_match.values():
        assert sorted(f[54] for f in pair) == ["1", "2"]
        assert len({(f[55], f[31], f[32]) for f in pair}) == 1
    symbols = {f[55] for f in fills}
    assert symbols == {"ACORN.LAB", "BIRCH.LAB"}
    print(f"\nshard a down {outage:.2f}s (kill to first ACORN.LAB New of an order sent after it; "
          f"{len(in_flight)} sent before the kill acknowledged by the new matcher); "
          f"meanwhile BIRCH.LAB: {len(birch_news)} New, {len(birch_fills)} fills; replayed "
          f"{line.group(2)} entries; resting on shard a before the kill: {len(split[0])} in its snapshot, "
          f"{len(split[1])} after it; {len(by_match)} trades; "
          + ", ".join(f"{c.drivers[next(iter(c.drivers))].comp_id}..: {len(c.ledger.orders)} orders"
                      for c in clients))

