"""A progress bar on stderr (redrawn in place on a terminal, a line per tenth otherwise)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, total: int, label: str, out: TextIO = sys.stderr, width: int = 30) -> None:
        self.total = max(total, 1)
        self.label = label
        self.out = out
        self.width = width
        self.tty = out.isatty()
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._last_tenth = -1

    def update(self, done: int) -> None:
        frac = min(done / self.total, 1.0)
        now = time.monotonic()
        if self.tty:
            if now - self._last_draw < 0.1 and done < self.total:
                return
            self._last_draw = now
            filled = int(frac * self.width)
            bar = "#" * filled + "-" * (self.width - filled)
            self.out.write(f"\r{self.label:<28} [{bar}] {frac:6.1%} {now - self.started:6.1f}s")
            self.out.flush()
        else:
            tenth = int(frac * 10)
            if tenth != self._last_tenth:
                self._last_tenth = tenth
                self.out.write(f"{self.label}: {frac:.0%} ({now - self.started:.1f}s)\n")
                self.out.flush()

    def close(self, note: str = "") -> None:
        if self.tty:
            self.out.write(f"\r\033[K{self.label:<28} {note or 'done'} "
                           f"({time.monotonic() - self.started:.1f}s)\n")
            self.out.flush()
        elif note:
            self.out.write(f"{self.label}: {note}\n")
            self.out.flush()
