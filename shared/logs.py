"""Structured logs: one logfmt line per event, with the service (and session where known)."""

from __future__ import annotations

import contextlib
import faulthandler
import io
import logging
import os
import signal
import sys
import time


class LogfmtFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    @staticmethod
    def _quote(value: object) -> str:
        text = str(value)
        if text == "" or any(c in text for c in ' "=\n'):
            return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        return text

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [f"ts={ts}.{int(record.msecs):03d}Z", f"level={record.levelname.lower()}",
                 f"service={self.service}", f"logger={record.name}"]
        session = getattr(record, "session", None)
        if session:
            parts.append(f"session={self._quote(session)}")
        parts.append(f"msg={self._quote(record.getMessage())}")
        if record.exc_info:
            parts.append(f"exc={self._quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


STACKS_SIGNAL = signal.SIGUSR2  # kill -USR2 PID: every thread's Python stack on stderr, and on it goes


def setup(service: str) -> None:
    """Log to stderr in logfmt at FIXLAB_LOG_LEVEL (default INFO).

    Also on stderr: the Python stacks of a crash (SIGSEGV in an extension, SIGABRT ...) and, on
    ``STACKS_SIGNAL``, of every thread of a process that is still running (the runner sends it to
    a service that does not stop in time, before it kills it).
    """
    with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):  # stderr not a file
        faulthandler.enable()
        faulthandler.register(STACKS_SIGNAL, all_threads=True)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get("FIXLAB_LOG_LEVEL", "INFO").upper())
