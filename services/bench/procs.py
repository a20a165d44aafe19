"""Child processes the suite and the tests start and always stop: the stacks and the baseline, and
the CPU time each of their processes spends (from /proc)."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from shared.config import parse_instruments
from shared.redis_server import RedisServer, free_port


class Child:
    """A process in its own process group, output to a log file; stop() ends the whole group."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(list(argv), env=dict(env), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def wait_port(host: str, port: int, children: Sequence[Child], timeout_s: float) -> None:
    """Wait until host:port accepts a connection; fail at once if a child died meanwhile."""
    deadline = time.monotonic() + timeout_s
    while True:
        for child in children:
            if not child.alive():
                raise RuntimeError(f"{child.name} exited with {child.proc.returncode} before "
                                   f"{host}:{port} opened:\n{child.tail()}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{host}:{port} did not open in {timeout_s:.0f}s") from None
            time.sleep(0.05)


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("FIXLAB_LOG_LEVEL", "WARNING")
    env.update(extra or {})
    return env


class Baseline:
    """The engine-only acceptor on a free port."""

    def __init__(self, workdir: Path, python: str = sys.executable, ignore_every: int = 0,
                 fills: bool = False) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.python = python
        self.ignore_every = ignore_every
        self.fills = fills  # answer crossing orders with Fills, as the exchange does
        self.child: Child | None = None

    def __enter__(self) -> Baseline:
        argv = (self.python, "-m", "services.bench.baseline", "--port", str(self.port),
                "--ignore-every", str(self.ignore_every), *(("--fills",) if self.fills else ()))
        self.child = Child("baseline", argv, base_env(), self.workdir / "baseline.log")
        try:
            wait_port("127.0.0.1", self.port, [self.child], 60)
        except BaseException:
            self.child.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.child is not None:
            self.child.stop()


class Stack:
    """A lean exchange: its own redis-server (no AOF), then ``python -m services.matcher`` (one per
    shard of FIXLAB_SHARDS, as the runner starts them) and ``python -m services.gateway``, configured
    from the environment, FIX on a free loopback port. No runner, web or bots: FullStack has them."""

    def __init__(self, workdir: Path, python: str = sys.executable,
                 env: Mapping[str, str] | None = None) -> None:
        self.workdir = workdir
        self.python = python
        self.fix_port = free_port()
        self.redis = RedisServer(workdir / "redis")
        self.children: list[Child] = []
        self.extra = dict(env or {})  # more variables for every service of it

    @property
    def url(self) -> str:
        return self.redis.url

    def __enter__(self) -> Stack:
        self.redis.start()
        try:
            env = base_env({"REDIS_URL": self.redis.url, "FIXLAB_FIX_PORT": str(self.fix_port),
                            "FIXLAB_FIX_HOST": "127.0.0.1", "FIXLAB_RUN_DIR": str(self.workdir / "run"),
                            **self.extra})
            shards = sorted({i.shard for i in parse_instruments(env)})
            for shard in shards:
                name = "matcher" if len(shards) == 1 else f"matcher-{shard}"
                self.children.append(Child(name, (self.python, "-m", "services.matcher"),
                                           {**env, "FIXLAB_MATCHER_SHARD": shard},
                                           self.workdir / f"{name}.log"))
            self.children.append(Child("gateway", (self.python, "-m", "services.gateway"), env,
                                       self.workdir / "gateway.log"))
            wait_port("127.0.0.1", self.fix_port, self.children, 60)
        except BaseException:
            self.__exit__()
            raise
        return self

    def processes(self) -> dict[str, int]:
        """Every process of this stack by name: redis-server, the services and their children."""
        out: dict[str, int] = {}
        if self.redis.proc is not None:
            out["redis-server"] = self.redis.proc.pid
        for child in self.children:
            out.update(named_tree(child.proc.pid, child.name))
        return out

    def __exit__(self, *exc: object) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()
        self.redis.stop()


class FullStack:
    """The stack exactly as ``make run`` starts it: ``python -m services`` (its runner, a private
    redis-server with the AOF, one matcher per shard, gateway with the lab manager, web, bots), on
    free ports, in a run directory of its own. Bots off (FIXLAB_BOTS=0) unless ``env`` says otherwise:
    their quotes would trade with the bench's orders. Nothing else is changed, the log level included.
    """

    def __init__(self, workdir: Path, python: str = sys.executable,
                 env: Mapping[str, str] | None = None, args: Sequence[str] = (),
                 gateways: int = 1) -> None:
        self.workdir = workdir
        self.python = python
        self.args = tuple(args)  # e.g. ("--cluster",): then set gateways to what it starts (2)
        self.gateways = gateways
        # Gateway k listens on fix_port + k - 1 (the runner's layout): all of them must be free.
        self.fix_port = free_ports_in_a_row(gateways)
        self.web_port = free_port()
        self.extra = {"FIXLAB_BOTS": "0", **(env or {})}
        self.child: Child | None = None

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def __enter__(self) -> FullStack:
        env = dict(os.environ)
        env.pop("REDIS_URL", None)  # make run starts its own redis-server when none is given
        env.update({"PYTHONUNBUFFERED": "1", "FIXLAB_FIX_PORT": str(self.fix_port),
                    "FIXLAB_WEB_PORT": str(self.web_port), "FIXLAB_RUN_DIR": str(self.workdir / "run"),
                    **self.extra})
        self.child = Child("run", (self.python, "-m", "services", *self.args), env, self.workdir / "run.log")
        try:
            for k in range(self.gateways):
                wait_port("127.0.0.1", self.fix_port + k, [self.child], 90)
            wait_http(f"{self.web_url}/api/health", [self.child], 60)
        except BaseException:
            self.child.stop(20)
            raise
        return self

    @property
    def redis_url(self) -> str:
        """The private redis-server's URL, or the cluster's nodes (a comma list), as the runner printed it."""
        said = self.child.tail(1 << 20) if self.child else ""
        found = re.search(r"redis-server on (redis://\S+)", said)
        if found is not None:
            return found.group(1)
        nodes = re.search(r"Redis Cluster: \d+ masters on (.*?) \(data in", said)
        if nodes is not None:
            return nodes.group(1).replace(" ", "")
        raise RuntimeError("the runner did not say where its Redis is")

    def processes(self) -> dict[str, int]:
        """Every process under the runner, by name (matcher-a, gateway, gateway publisher, web ...)."""
        if self.child is None:
            return {}
        return named_tree(self.child.proc.pid, "run")

    def __exit__(self, *exc: object) -> None:
        if self.child is not None:
            self.child.stop(30)  # the runner stops its services tier by tier, then redis-server
            self.child = None


def free_ports_in_a_row(count: int) -> int:
    """A free port whose next ``count - 1`` ports are free too (checked now, as free_port does)."""
    while True:
        port = free_port()
        if port + count - 1 > 65535:
            continue
        taken = False
        for other in range(port + 1, port + count):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", other))
                except OSError:
                    taken = True
                    break
        if not taken:
            return port


def wait_http(url: str, children: Sequence[Child], timeout_s: float) -> None:
    """Wait until ``url`` answers 200; fail at once if a child died meanwhile."""
    deadline = time.monotonic() + timeout_s
    while True:
        for child in children:
            if not child.alive():
                raise RuntimeError(f"{child.name} exited with {child.proc.returncode} before {url} "
                                   f"answered:\n{child.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer in {timeout_s:.0f}s")
        time.sleep(0.1)


# ---------------------------------------------------------------------- CPU time from /proc

def cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds (all its threads); None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        with contextlib.suppress(OSError, ValueError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def process_name(pid: int, fallback: str) -> str:
    """A readable name from the command line: ``python -m services.matcher`` is "matcher" (with its
    shard when FIXLAB_MATCHER_SHARD is not the default), a redis-server is "redis-server"."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return fallback
    args = [a.decode(errors="replace") for a in argv if a]
    if args and os.path.basename(args[0]).startswith("redis-server"):
        return "redis-server"
    if "-m" in args[:-1]:
        module = args[args.index("-m") + 1]
        name = module.removeprefix("services.").replace(".", " ") if module != "services" else "run"
        if name == "matcher":
            shard = _env_of(pid).get("FIXLAB_MATCHER_SHARD", "0")
            return "matcher" if shard == "0" else f"matcher-{shard}"
        if name.startswith("gateway"):
            # One of several gateways (the runner sets its index): "gateway-2", "gateway-2 publisher".
            index = _env_of(pid).get("FIXLAB_GATEWAY_INDEX", "")
            if index:
                return name.replace("gateway", f"gateway-{index}", 1)
        return name
    return fallback


def _env_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


def named_tree(pid: int, name: str) -> dict[str, int]:
    """``pid`` and its descendants, named from their command lines (see process_name)."""
    out = {name: pid}
    for n, child in enumerate(children_of(pid)):
        child_name = process_name(child, f"{name} child {n}")
        if child_name in out:
            child_name = f"{child_name} {n}"
        out.update(named_tree(child, child_name))
    return out


class CpuSampler:
    """Sample the CPU seconds of named processes every ``interval_s`` on a thread, with wall-clock
    times, so that the CPU spent between two instants (the bench's measured phase) can be read."""

    def __init__(self, pids: Mapping[str, int], interval_s: float = 0.2) -> None:
        self.pids = dict(pids)
        self.interval_s = interval_s
        self.samples: list[tuple[int, dict[str, float]]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)

    def add(self, name: str, pid: int) -> None:
        with self._lock:
            self.pids[name] = pid

    def sample(self) -> None:
        with self._lock:
            pids = dict(self.pids)
        now = time.time_ns()
        got = {name: cpu for name, pid in pids.items() if (cpu := cpu_seconds(pid)) is not None}
        with self._lock:
            self.samples.append((now, got))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> CpuSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start_ns: int, end_ns: int) -> dict[str, float]:
        """CPU seconds each process spent from ``start_ns`` to ``end_ns`` (wall clock), interpolated
        linearly between the samples either side of each instant."""
        with self._lock:
            samples = list(self.samples)
        names = {n for _, got in samples for n in got}
        return {n: max(0.0, _at(samples, n, end_ns) - _at(samples, n, start_ns)) for n in sorted(names)}


def _at(samples: Sequence[tuple[int, Mapping[str, float]]], name: str, t_ns: int) -> float:
    points = [(t, got[name]) for t, got in samples if name in got]
    if not points:
        return 0.0
    if t_ns <= points[0][0]:
        return points[0][1]
    for (t0, c0), (t1, c1) in itertools.pairwise(points):
        if t0 <= t_ns <= t1:
            return c0 + (c1 - c0) * (t_ns - t0) / (t1 - t0) if t1 > t0 else c1
    return points[-1][1]
