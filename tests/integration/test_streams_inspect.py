"""The inspector (``fixlab`` / ``python -m shared.streams``) against a real redis-server."""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TextIO

import pytest
import redis

from shared import bus, streams
from shared.schema import Accepted, NewOrder, WireRecord
from shared.streams import inspect
from shared.streams.__main__ import run
from tests.helpers import eventually

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ORDERS = streams.orders_stream("a")
EVENTS = streams.shard_events_stream("a", "gw1")  # what shard a answers gateway gw1


def _order(i: int) -> NewOrder:
    return NewOrder("CLIENT01", f"c{i}", "ACORN.LAB", 1, 10000 + i, 5, 0, "gw1", i + 1, 1_700_000_000 + i)


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = bus.connect(redis_url)
    yield client
    client.close()


@pytest.fixture
def busy_bus(r: redis.Redis) -> dict[str, list[bytes]]:
    """Orders read by a matcher group (two pending, one acknowledged) and events nobody reads."""
    ids = [bus.publish(r, ORDERS, [_order(i)], 1000) for i in range(3)]
    bus.ensure_group(r, ORDERS, streams.MATCHER_GROUP)
    r.xreadgroup(streams.MATCHER_GROUP, "m-a", {ORDERS: ">"}, count=3)
    r.xack(ORDERS, streams.MATCHER_GROUP, ids[0])
    ev = [bus.publish(r, EVENTS, [Accepted("CLIENT01", "c0", "O1", "ACORN.LAB", 1, 10000, 5, 0, "E1", 2)],
                      1000)]
    r.set("fixlab:not-a-stream", "x")
    return {"orders": ids, "events": ev}


def _cli(url: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(["--url", url, *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_list_shows_every_stream_with_groups_consumers_and_pending(
        r: redis.Redis, busy_bus: dict[str, list[bytes]]) -> None:
    rows = {s["stream"]: s for s in inspect.list_streams(r)}
    assert set(rows) == {ORDERS, EVENTS}
    orders = rows[ORDERS]
    assert orders["length"] == 3
    assert orders["entries_added"] == 3
    assert orders == inspect.stream_info(r, ORDERS) | {"groups": orders["groups"]}
    assert orders["first_id"] == busy_bus["orders"][0].decode()
    assert orders["last_id"] == busy_bus["orders"][2].decode()
    (group,) = orders["groups"]
    assert group["name"] == streams.MATCHER_GROUP
    assert group["pending"] == 2
    assert group["lag"] == 0
    assert group["consumers"][0]["name"] == "m-a"
    assert group["consumers"][0]["pending"] == 2
    assert rows[EVENTS]["groups"] == []


def test_list_as_a_table_and_as_json(redis_url: str, busy_bus: dict[str, list[bytes]]) -> None:
    code, out, _ = _cli(redis_url, "list")
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == ["STREAM", "LENGTH", "FIRST", "LAST", "GROUP", "CONSUMERS", "PENDING", "LAG"]
    assert any(line.split()[0] == ORDERS and "m-a:2" in line.split() for line in lines)
    code, out, _ = _cli(redis_url, "list", "--json")
    assert code == 0
    assert {s["stream"] for s in json.loads(out)} == {ORDERS, EVENTS}


def test_tail_prints_the_last_entries_decoded_one_json_per_line(
        redis_url: str, busy_bus: dict[str, list[bytes]]) -> None:
    code, out, _ = _cli(redis_url, "tail", ORDERS, "-n", "2")
    assert code == 0
    entries = [json.loads(line) for line in out.splitlines()]
    assert [e["id"] for e in entries] == [i.decode() for i in busy_bus["orders"][1:]]
    assert [e["messages"][0]["clordid"] for e in entries] == ["c1", "c2"]
    assert entries[0]["messages"][0]["type"] == "NewOrder"


def test_show_one_entry(redis_url: str, busy_bus: dict[str, list[bytes]]) -> None:
    code, out, _ = _cli(redis_url, "show", EVENTS, busy_bus["events"][0].decode())
    assert code == 0
    entry = json.loads(out)
    assert entry["messages"][0] == {
        "type": "Accepted", "session": "CLIENT01", "clordid": "c0", "order_id": "O1", "symbol": "ACORN.LAB",
        "side": 1, "price": 10000, "qty": 5, "tif": 0, "exec_id": "E1", "ts": 2,
        "ord_type": 2, "stop_px": 0}


def test_pending_lists_a_groups_entries_on_every_stream_that_has_it(
        redis_url: str, busy_bus: dict[str, list[bytes]]) -> None:
    code, out, _ = _cli(redis_url, "pending", streams.MATCHER_GROUP)
    assert code == 0
    (result,) = json.loads(out)
    assert result["stream"] == ORDERS
    assert result["pending"] == 2
    assert result["consumers"] == {"m-a": 2}
    assert [e["id"] for e in result["entries"]] == [i.decode() for i in busy_bus["orders"][1:]]
    assert all(e["deliveries"] == 1 and e["consumer"] == "m-a" for e in result["entries"])
    code, out, _ = _cli(redis_url, "pending", streams.MATCHER_GROUP, ORDERS)
    assert code == 0 and json.loads(out)[0]["pending"] == 2


@pytest.mark.parametrize(("argv", "expected"), [
    (("tail", "fixlab:nothing"), "no stream named 'fixlab:nothing'"),
    (("tail", "fixlab:not-a-stream"), "is a Redis string, not a stream"),
    (("show", ORDERS, "12-x"), "is not a stream entry id"),
    (("show", ORDERS, "1-0"), "has no entry '1-0'"),
    (("pending", "nobody"), "no consumer group 'nobody' on any stream"),
    (("pending", "nobody", ORDERS), "no consumer group 'nobody' on stream"),
    (("tail", ORDERS, "-n", "-3"), "give 0 to"),
])
def test_bad_requests_get_one_clear_line(redis_url: str, busy_bus: dict[str, list[bytes]],
                                         argv: tuple[str, ...], expected: str) -> None:
    code, out, err = _cli(redis_url, *argv)
    assert code == 1
    assert out == ""
    assert expected in err and err.count("\n") == 1


def test_unreachable_redis_and_a_missing_url_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.redis_server import free_port

    code, _, err = _cli(f"redis://:secret@127.0.0.1:{free_port()}/0", "list")
    assert code == 1 and "unreachable" in err and "secret" not in err
    monkeypatch.delenv("REDIS_URL", raising=False)
    out, err_io = io.StringIO(), io.StringIO()
    assert run(["list"], out, err_io) == 2
    assert "REDIS_URL" in err_io.getvalue()
    assert run(["--url", "http://example", "list"], out, err_io) == 2


def _state(r: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key's serialized value: a stream's DUMP holds its entries, groups, consumers and PEL."""
    return {k: r.dump(k) for k in r.scan_iter(count=1000)}  # type: ignore[misc]


def test_the_inspector_is_read_only(redis_url: str, r: redis.Redis,
                                    busy_bus: dict[str, list[bytes]]) -> None:
    # A user that may only read: any write the inspector tried would fail with NOPERM.
    r.acl_setuser("inspector", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                  commands=["-@all", "+@read", "+@connection"])
    try:
        before = _state(r)
        url = redis_url.replace("redis://", "redis://inspector:pw@")
        for argv in (("list",), ("list", "--json"), ("tail", ORDERS, "-n", "5"),
                     ("show", ORDERS, busy_bus["orders"][1].decode()), ("pending", streams.MATCHER_GROUP),
                     ("pending", streams.MATCHER_GROUP, ORDERS), ("tail", EVENTS)):
            code, out, err = _cli(url, *argv)
            assert (code, err) == (0, "") and out.strip(), argv
        assert _state(r) == before
        # And the restricted user really cannot write, so the check above can fail.
        limited = redis.Redis.from_url(url)
        with pytest.raises(redis.exceptions.NoPermissionError):
            limited.xadd(ORDERS, {b"b": b""})
        limited.close()
    finally:
        r.acl_deluser("inspector")


class _Lines:
    """Lines of a child's stdout, read on a thread so the test never blocks on the pipe."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.q: queue.Queue[str] = queue.Queue()
        self.got: list[str] = []
        assert proc.stdout is not None
        self.thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self.thread.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self.q.put(line)

    def drain(self) -> list[str]:
        while not self.q.empty():
            self.got.append(self.q.get_nowait())
        return self.got


def test_tail_follow_prints_new_entries_as_they_arrive(redis_url: str, r: redis.Redis,
                                                       busy_bus: dict[str, list[bytes]]) -> None:
    lab = streams.lab_stream("lab42")
    bus.publish(r, lab, [WireRecord("lab42", 1, "client", b"8=FIX.4.4\x0135=A\x01", False, 1)], 1000)
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "shared.streams", "tail", lab, "-n", "1", "-f"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = _Lines(proc)
    try:
        eventually(lambda: len(lines.drain()) == 1, what="the existing entry")
        bus.publish(r, lab, [WireRecord("lab42", 2, "exchange", b"8=FIX.4.4\x0135=A\x01", True, 2)], 1000)
        eventually(lambda: len(lines.drain()) == 2, what="the new entry")
        records = [json.loads(line)["messages"][0] for line in lines.got]
        assert [(m["n"], m["source"], m["raw"], m["withheld"]) for m in records] == [
            (1, "client", "8=FIX.4.4|35=A|", False), (2, "exchange", "8=FIX.4.4|35=A|", True)]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            lines.thread.join(5)
            assert proc.stdout is not None
            proc.stdout.close()
    assert proc.returncode == 0


def test_the_fixlab_console_script(redis_url: str, busy_bus: dict[str, list[bytes]]) -> None:
    script = Path(sys.executable).parent / "fixlab"
    if not script.is_file():
        pytest.skip(f"{script} is not installed (`make install` installs the package's scripts)")
    done = subprocess.run([str(script), "--url", redis_url, "pending", streams.MATCHER_GROUP],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["pending"] == 2


def test_tail_follow_waits_for_a_stream_that_does_not_exist_yet(redis_url: str, r: redis.Redis) -> None:
    lab = streams.lab_stream("lab-later")
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "shared.streams", "tail", lab, "-f"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = _Lines(proc)
    try:
        assert proc.stderr is not None
        assert "waiting for it" in proc.stderr.readline()
        bus.publish(r, lab, [WireRecord("lab-later", 1, "client", b"8=FIX.4.4\x01", False, 1)], 1000)
        eventually(lambda: len(lines.drain()) == 1, what="the first entry of the new stream")
        assert json.loads(lines.got[0])["messages"][0]["lab_id"] == "lab-later"
        assert set(r.scan_iter()) == {lab.encode()}  # waiting created nothing (no group, no key)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            lines.thread.join(5)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
    assert proc.returncode == 0


class _PublishWhenWaiting(io.StringIO):
    """The tail's stderr: the moment it says it waits, the stream's first entry is added.

    That is the race a loaded machine makes: the entry that creates the stream lands between the
    tail's look (no stream) and its first read. Made here on purpose, every run.
    """

    def __init__(self, r: redis.Redis, lab: str) -> None:
        super().__init__()
        self.r, self.lab = r, lab

    def write(self, text: str) -> int:
        if "waiting for it" in text:
            record = WireRecord("lab-race", 1, "client", b"8=FIX.4.4\x01", False, 1)
            bus.publish(self.r, self.lab, [record], 1000)
        return super().write(text)


class _FirstLine(io.StringIO):
    """The tail's stdout: keeps the first line, then closes as `| head -1` would."""

    def write(self, text: str) -> int:
        n = super().write(text)
        if "\n" in self.getvalue():
            raise BrokenPipeError
        return n


def _tail_follow(redis_url: str, lab: str, out: TextIO, err: TextIO) -> tuple[threading.Thread, list[int]]:
    """``fixlab tail LAB -f`` in a thread of this process; the list gets its exit status."""
    codes: list[int] = []
    argv = ["--url", redis_url, "tail", lab, "-f"]
    tail = threading.Thread(target=lambda: codes.append(run(argv, out, err)), daemon=True)
    tail.start()
    return tail, codes


def test_tail_follow_prints_the_entry_that_creates_the_stream_right_after_it_looked(
        redis_url: str, r: redis.Redis) -> None:
    lab = streams.lab_stream("lab-race")
    out = _FirstLine()
    tail, codes = _tail_follow(redis_url, lab, out, _PublishWhenWaiting(r, lab))
    try:
        tail.join(10)
        assert codes == [0], f"the tail printed {out.getvalue()!r} and is still waiting"
        assert json.loads(out.getvalue())["messages"][0]["lab_id"] == "lab-race"
    finally:
        if tail.is_alive():  # end its blocked read: drop every connection but ours
            r.client_kill_filter(_type="normal", skipme=True)
            tail.join(5)


def test_tail_follow_of_an_empty_stream_prints_what_comes_after_it_looked(redis_url: str,
                                                                          r: redis.Redis) -> None:
    lab = streams.lab_stream("lab-empty")
    bus.publish(r, lab, [WireRecord("lab-empty", 1, "client", b"8=FIX.4.4\x01", False, 1)], 1000)
    r.xtrim(lab, maxlen=0, approximate=False)  # the stream is there, with no entries
    assert r.xlen(lab) == 0
    out = _FirstLine()
    tail, codes = _tail_follow(redis_url, lab, out, io.StringIO())
    try:
        bus.publish(r, lab, [WireRecord("lab-empty", 2, "client", b"8=FIX.4.4\x01", False, 2)], 1000)
        tail.join(10)
        assert codes == [0], f"the tail printed {out.getvalue()!r} and is still waiting"
        assert json.loads(out.getvalue())["messages"][0]["n"] == 2
    finally:
        if tail.is_alive():
            r.client_kill_filter(_type="normal", skipme=True)
            tail.join(5)
