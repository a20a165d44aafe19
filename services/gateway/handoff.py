"""The acceptor's end of the intake: hand each received order to the publisher process over a pipe.

On the QuickFIX engine thread, ``send`` writes a message's text, as QuickFIX hands it over, to the
publisher's pipe as one record (services.gateway.records) without blocking: one system call, and no
other Python thread of this process is woken, so the engine thread keeps the GIL to itself (see
publisher.py for why). The bound is here: with ``max_pending`` records not yet on the bus (Redis
down, a flood), ``send`` says no and the acceptor refuses the order at once ("exchange busy")
rather than stall every session. Commands made here (SessionEnded, EndOfDay) are records of their
own kind and are never refused. A full pipe is not the bound (it holds ~5,000 orders: a publisher
kept off the CPU for tens of milliseconds under a flood fills it): records that do not fit wait
here, in order, and go into the pipe at the next ``send`` or when the publisher next reports.

Nothing is lost when the publisher dies: every record stays here until the publisher reports it
done; a new publisher is started with the records not yet done, and it skips those its predecessor
had already published (the done count is written in the same transaction as the orders).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.gateway.records import command_record, fix_record
from shared.schema import Command, StpSetting

log = logging.getLogger(__name__)

PIPE_SIZE = 1 << 20  # ~5,000 orders in flight between the two processes
BIG_WRITE_TIMEOUT_S = 10.0


@dataclass(slots=True)
class PublisherStats:
    """The publisher's counts as last reported, plus the acceptor's own (plain ints, one writer each)."""

    published: int = 0
    refused: int = 0  # orders the publisher refused (answered on the events stream)
    errors: int = 0  # the publisher's
    bad_reports: int = 0  # lines from the publisher that the acceptor could not take
    restarts: int = 0


class Handoff:
    """Start with ``start()``; ``send`` from QuickFIX callbacks; ``stop()`` publishes what is left."""

    def __init__(self, run: str, *, max_pending: int, env: Mapping[str, str] | None = None,
                 restart_delay_s: float = 0.5) -> None:
        self.run = run
        self.max_pending = max_pending
        self.env = dict(os.environ if env is None else env)
        self.restart_delay_s = restart_delay_s
        self.stats = PublisherStats()
        self._lock = threading.Lock()  # the pipe: one whole record at a time, in order
        # Records written and not yet done, oldest first. Appended under _lock, trimmed under
        # _trim_lock only: the reader must never wait for a writer that waits for the publisher.
        self._pending: deque[bytes] = deque()
        self._trim_lock = threading.Lock()
        self._pending_first = 1  # number of _pending[0]
        # The last records of _pending, not in the pipe yet (it was full), oldest first. Under _lock.
        self._unwritten: deque[bytes] = deque()
        self._proc: subprocess.Popen[bytes] | None = None
        self._fd = -1  # write end of the publisher's stdin; -1 while there is no publisher
        self._stopping = False
        self._ready = threading.Event()  # the first publisher has reported
        self._readers: list[threading.Thread] = []

    # ------------------------------------------------------------------ engine threads

    def send(self, raw: str) -> bool:
        """Hand over a received order message; False when it cannot be taken now (refuse it)."""
        # surrogateescape: the exact bytes QuickFIX had (SWIG decodes them so).
        record = fix_record(raw.encode("utf-8", "surrogateescape"))
        with self._lock:
            if len(self._pending) >= self.max_pending:
                return False
            fd = self._fd
            if self._unwritten and not self._flush():
                self._unwritten.append(record)  # behind the others that wait for room in the pipe
            elif fd >= 0 and len(record) <= select.PIPE_BUF:  # the usual case, inline: it is per order
                try:
                    os.write(fd, record)  # up to PIPE_BUF bytes a pipe write is all or nothing
                except BlockingIOError:
                    self._unwritten.append(record)
                except OSError as exc:
                    self._lost(exc)
            elif not self._write(record, wait=False):
                self._unwritten.append(record)
            self._pending.append(record)
        return True

    def flush(self) -> None:
        """Put the records that wait for room into the pipe, as far as it takes them (never waits
        for a writer: the publisher's reader calls this on each report)."""
        if self._unwritten and self._lock.acquire(blocking=False):
            try:
                self._flush()
            finally:
                self._lock.release()

    def _flush(self, wait: bool = False) -> bool:
        """Write the waiting records, oldest first, while the pipe takes them (``wait``: all of them,
        as ``_write`` waits); True when none is left (caller holds the lock)."""
        unwritten = self._unwritten
        while unwritten:
            if self._fd < 0:
                unwritten.clear()  # no publisher: the next one is given every pending record
                return True
            if not self._write(unwritten[0], wait=wait):
                return False
            unwritten.popleft()
        return True

    def send_command(self, cmd: Command | StpSetting) -> None:
        """Hand over a command that must not be refused (SessionEnded, a setting), after what came
        before it."""
        record = command_record(cmd)
        with self._lock:
            self._flush(wait=True)  # after the orders that wait for room in the pipe
            self._write(record, wait=True)
            self._pending.append(record)

    def _write(self, record: bytes, *, wait: bool) -> bool:
        """Write one whole record; False when the pipe is full and ``wait`` is off."""
        fd = self._fd
        if fd < 0:
            return True  # no publisher just now: the record waits in _pending and goes to the next
        try:
            if len(record) <= select.PIPE_BUF:
                try:
                    os.write(fd, record)
                    return True
                except BlockingIOError:
                    if not wait:
                        return False
            self._write_all(fd, record)
        except OSError as exc:
            self._lost(exc)
        return True

    def _lost(self, exc: OSError) -> None:
        # The publisher is gone: the reader thread starts another, which gets every pending record.
        log.warning("publisher pipe closed (%s); records wait for the next publisher", exc)
        self._fd = -1

    def _write_all(self, fd: int, record: bytes) -> None:
        """Write a record of any size, waiting for the publisher to read (it always drains its pipe)."""
        view = memoryview(record)
        deadline = time.monotonic() + BIG_WRITE_TIMEOUT_S
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                if time.monotonic() > deadline:
                    # Half a record is in the pipe: this publisher cannot go on. Its successor gets it whole.
                    log.error("publisher stopped reading for %.0f s: restarting it", BIG_WRITE_TIMEOUT_S)
                    self._kill()
                    raise BrokenPipeError("publisher stalled") from None
                select.select([], [fd], [], 0.5)

    # ------------------------------------------------------------------ the publisher process

    def start(self, ready_timeout_s: float = 30.0) -> Handoff:
        """Start the publisher and wait until it reads its pipe (a flood at once would fill it)."""
        with self._lock:
            self._spawn()
        if not self._ready.wait(ready_timeout_s):
            log.error("the publisher did not report ready in %.0f s; orders wait in its pipe",
                      ready_timeout_s)
        return self

    def _spawn(self) -> None:
        """Start a publisher and give it every record not yet done (caller holds the lock)."""
        with self._trim_lock:
            first = self._pending_first
            waiting = list(self._pending)
        self._unwritten.clear()  # the new publisher is given every pending record
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.gateway.publisher", "--run", self.run, "--first", str(first),
             "--generation", str(self.stats.restarts)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env)
        assert proc.stdin is not None and proc.stdout is not None
        fd = proc.stdin.fileno()
        # Where the system's limit is lower the default pipe (64 KiB) works too, it just fills sooner.
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        os.set_blocking(fd, False)
        self._proc = proc
        self._fd = fd
        reader = threading.Thread(target=self._read, args=(proc,), name="gateway-publisher-reader",
                                  daemon=True)
        self._readers.append(reader)
        reader.start()
        for record in waiting:
            try:
                self._write_all(fd, record)
            except OSError as exc:
                log.error("publisher died while taking %d waiting records: %s", len(waiting), exc)
                self._fd = -1
                return
        if waiting:
            log.info("publisher %d started with %d waiting records", proc.pid, len(waiting))

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """Progress from one publisher; when it dies unasked, start another."""
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                self._take(json.loads(line))
            except Exception:
                self.stats.bad_reports += 1
                log.exception("bad message from the publisher: %r", line[:200])
        code = proc.wait()
        proc.stdout.close()
        with self._lock:
            if self._stopping or self._proc is not proc:
                return
            self._close_stdin(proc)
            self._fd = -1
        log.error("publisher %d exited with %s; starting another for %d waiting records",
                  proc.pid, code, len(self._pending))
        self.stats.restarts += 1
        delay = self.restart_delay_s
        while True:
            time.sleep(delay)
            with self._lock:
                if self._stopping:
                    return
                try:
                    self._spawn()
                    return
                except OSError as exc:  # cannot start a process just now: orders wait (bounded)
                    log.error("cannot start a publisher (%s); trying again in %.1f s", exc, delay)
            delay = min(delay * 2, 10.0)

    def _take(self, item: list[Any]) -> None:
        kind = item[0]
        if kind == "S":
            self._ready.set()
            done, published, refused, errors = (int(v) for v in item[1:5])
            s = self.stats
            s.published, s.refused, s.errors = published, refused, errors
            with self._trim_lock:
                while self._pending and self._pending_first <= done:
                    self._pending.popleft()
                    self._pending_first += 1
            self.flush()  # the publisher has read: room in the pipe for what waits
        else:
            raise ValueError(f"unknown kind {kind!r}")

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    @staticmethod
    def _close_stdin(proc: subprocess.Popen[bytes]) -> None:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()

    @property
    def waiting(self) -> int:
        """Records handed over and not yet on the bus (or refused)."""
        return len(self._pending)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Close the pipe: the publisher publishes what it holds (while Redis answers) and exits."""
        with self._lock:
            self._flush(wait=True)  # the orders that wait for room: the publisher publishes them too
            self._stopping = True
            proc = self._proc
            self._fd = -1
        if proc is None:
            return
        self._close_stdin(proc)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.error("publisher did not finish in %.0f s: %d records unpublished", timeout_s,
                      len(self._pending))
            proc.kill()
            proc.wait()
        for reader in self._readers:
            reader.join(2.0)
        if self._pending:
            log.error("stopping with %d records not on the bus", len(self._pending))
