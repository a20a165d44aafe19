"""What the intake benchmarks share: a flood of NewOrderSingle as raw FIX, and CPU time from /proc."""

from __future__ import annotations

import os
from pathlib import Path

SOH = b"\x01"
COMP_ID = "INTAKE"


def frame(fields: list[tuple[int, str]]) -> bytes:
    body = b"".join(f"{t}={v}".encode() + SOH for t, v in fields)
    head = b"8=FIX.4.4" + SOH + f"9={len(body)}".encode() + SOH
    total = head + body
    return total + f"10={sum(total) % 256:03d}".encode() + SOH


def encode_orders(n: int, first_seq: int, sending_time: str) -> list[bytes]:
    """``n`` NewOrderSingle, alternating buy and sell at one price (as the reference bench does)."""
    out = []
    for i in range(n):
        side = "1" if i % 2 == 0 else "2"
        out.append(frame([(35, "D"), (49, COMP_ID), (56, "FIXLAB"), (34, str(first_seq + i)),
                          (52, sending_time), (11, f"i{i}"), (55, "ACORN.LAB"), (54, side),
                          (60, sending_time), (38, "1"), (40, "2"), (44, "100.00")]))
    return out


def cpu_seconds(pid: int) -> float:
    return cpu_seconds_of(Path(f"/proc/{pid}/stat"))


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of ``pid`` (by thread id: the gateway logs which is which)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[task.name] = cpu_seconds_of(task / "stat")
        except OSError:
            continue
    return out


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (the gateway's intake publisher)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def cpu_seconds_of(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
