"""shared.supervisor with trivial children: stops on every signal, in tiers, and takes its children
along when it is killed -9."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]

# A child that writes its name to a file when SIGTERM reaches it, waits a little (as a service
# finishing its work does), then exits. IGNORE=1: it ignores SIGTERM. It logs as the services do.
CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from shared import logs
    logs.setup("child")
    name, log = sys.argv[1], sys.argv[2]
    def bye(*_):
        with open(log, "a") as f:
            f.write(name + "\\n")
        time.sleep(0.1)
        sys.exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if os.environ.get("IGNORE") else bye)
    print("up", flush=True)
    while True:
        time.sleep(1)
""")

RUNNER = textwrap.dedent("""
    import sys
    from shared.supervisor import ServiceSpec, Supervisor
    log, ignore = sys.argv[1], sys.argv[2] == "1"
    names = [("m", 0), ("g", 1), ("w", 2), ("b", 2)]
    specs = [ServiceSpec(n, (sys.executable, "-c", CHILD, n, log), {"IGNORE": "1"} if ignore else {}, tier)
             for n, tier in names]
    sys.exit(Supervisor(specs, {}, grace_s=float(sys.argv[3]),
                        on_ready=lambda: print("READY", flush=True)).run())
""")


def _start(tmp_path: Path, *, ignore: bool = False, grace_s: float = 5.0) -> subprocess.Popen[bytes]:
    code = f"CHILD = {CHILD!r}\n{RUNNER}"
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "order"), "1" if ignore else "0",
                             str(grace_s)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    # Every child runs its own code (its signal handler is installed) once it has said "up".
    _read_until(proc, lambda lines: sum(1 for x in lines if x.endswith("| up")) == 4)
    return proc


def _read_until(proc: subprocess.Popen[bytes], done: Callable[[list[str]], bool]) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    for raw in proc.stdout:
        lines.append(raw.decode().rstrip("\n"))
        if done(lines):
            return lines
    raise AssertionError(f"the runner's output ended: {lines}")


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigterm_stops_the_runner_every_time_highest_tier_first(tmp_path: Path) -> None:
    for attempt in range(5):
        order = tmp_path / "order"
        order.unlink(missing_ok=True)
        proc = _start(tmp_path)
        kids = _children(proc.pid)
        assert len(kids) == 4
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)  # what `kill`, systemd or a CI job sends: the whole group
        assert proc.wait(5) == 0, f"attempt {attempt}"
        took = time.monotonic() - started
        assert took < 3, f"attempt {attempt}: {took:.2f}s"
        assert proc.stdout is not None
        rest = proc.stdout.read().decode()
        proc.stdout.close()
        assert "run     | stopped" in rest
        got = order.read_text().split()
        # Web and bots (tier 2) together, then the gateway, then the matcher.
        assert sorted(got[:2]) == ["b", "w"] and got[2:] == ["g", "m"], got
        assert not any(_alive(k) for k in kids)


def test_a_second_signal_kills_what_does_not_stop(tmp_path: Path) -> None:
    proc = _start(tmp_path, ignore=True, grace_s=30.0)
    kids = _children(proc.pid)
    proc.send_signal(signal.SIGINT)
    _read_until(proc, lambda lines: lines[-1] == "run     | stopping")
    started = time.monotonic()
    # The children ignore SIGTERM: without a second signal the runner would wait out its grace.
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0
    assert time.monotonic() - started < 5
    assert proc.stdout is not None
    proc.stdout.close()
    assert not any(_alive(k) for k in kids)


def test_a_service_that_does_not_stop_in_time_shows_where_it_hangs_then_dies(tmp_path: Path) -> None:
    proc = _start(tmp_path, ignore=True, grace_s=1.0)
    kids = _children(proc.pid)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(15) == 0
    assert proc.stdout is not None
    rest = proc.stdout.read().decode()
    proc.stdout.close()
    # Each tier waits out its grace; each hung child's stack is in its log before it is killed.
    for name in "wbgm":
        assert f"{name}: did not stop in 1s; its threads' stacks follow in its log; killing it" in rest
        # Its own lines only: the children of a tier write theirs at the same time.
        own = "\n".join(x.split("| ", 1)[1] for x in rest.splitlines() if re.match(rf"{name} +\| ", x))
        assert re.search(r"^Current thread .*\n  File .*, line \d+ in <module>", own, re.M), rest
    assert not any(_alive(k) for k in kids)


def test_a_runner_killed_with_sigkill_takes_its_children_along(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    kids = _children(proc.pid)
    assert len(kids) == 4
    proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()
    for kid in kids:
        eventually(lambda kid=kid: not _alive(kid), timeout=5, what=f"child {kid} gone")
