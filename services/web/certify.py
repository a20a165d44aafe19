"""Certification runs started from the page: each a ``python -m services.client.certify`` process.

The web imports no other service (tests/unit/test_layers.py), so a run is the command a user would
type, as a child process with a port and a CompID of its own; its stdout (where to connect, the
script's instructions, each check's result) is kept for the page, and its JSON and HTML reports are
read when it ends. One run per CompID, at most ``runs`` at once, each killed after ``max_s``. A run
is of the FIX version its start names (``?fix_version=4.2|4.4|5.0SP2``, default 4.4: the command's
``--fix-version``).

Runs listen on ``FIXLAB_CERTIFY_LISTEN`` (loopback by default). Beyond loopback each run has a
one-time password, made here and handed to the command on its stdin (never an argument: the process
list shows those), that the client's Logon must carry (554; FIX 4.2: 96): it is in the start's
answer only, for the one who pressed Start; the run's view, which anyone may read, never holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse

from services.web.origin import origin_allowed
from shared.config import ConfigError, env_float, env_int, env_str
from shared.fix.versions import DEFAULT, VERSIONS, FixVersion, version

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
COMPS = tuple(f"CERT{n:02d}" for n in range(1, 9))
TARGET = "FIXLAB"
LINES = 300  # stdout lines kept per run (the shipped script prints about 40)

# A run's states: the first two while its process lives.
STARTING, WAITING = "starting", "waiting"  # before / after it listens (and waits for the Logon)
PASSED, FAILED, NO_LOGON, ERROR, KILLED = "passed", "failed", "no_logon", "error", "killed"
ENDED = {0: PASSED, 1: FAILED, 3: NO_LOGON}  # the command's exit codes; any other is ERROR


@dataclass(frozen=True, slots=True)
class CertifySettings:
    ports: tuple[int, ...]  # each run's tap listens on one of these (loopback)
    runs: int  # runs at once
    logon_timeout_s: float  # a run nobody logs on to ends after this, with a report saying so
    max_s: float  # a run still alive this long after its start is killed
    listen: str = "127.0.0.1"  # where runs listen; beyond loopback each has a one-time password

    @property
    def password_needed(self) -> bool:
        return self.listen not in LOOPBACK


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def certify_settings(env: Mapping[str, str]) -> CertifySettings:
    ports = parse_ports(env_str(env, "FIXLAB_CERTIFY_PORTS", "9890-9897"))
    logon = env_float(env, "FIXLAB_CERTIFY_LOGON_TIMEOUT", 60.0, lo=1.0, hi=600.0)
    max_s = env_float(env, "FIXLAB_CERTIFY_MAX_SECONDS", 180.0, lo=5.0, hi=3600.0)
    if max_s <= logon:
        raise ConfigError(f"FIXLAB_CERTIFY_MAX_SECONDS ({max_s:g}) must exceed "
                          f"FIXLAB_CERTIFY_LOGON_TIMEOUT ({logon:g}): a run plays its script after the Logon")
    listen = env_str(env, "FIXLAB_CERTIFY_LISTEN", "127.0.0.1").strip()
    if listen != "localhost":
        try:
            ipaddress.ip_address(listen)
        except ValueError:
            raise ConfigError(f"FIXLAB_CERTIFY_LISTEN={listen!r}: an IP address (0.0.0.0: every "
                              "interface)") from None
    return CertifySettings(ports, env_int(env, "FIXLAB_CERTIFY_RUNS", len(COMPS), lo=1, hi=len(COMPS)),
                           logon, max_s, listen)


def parse_ports(raw: str) -> tuple[int, ...]:
    """``9890-9897`` or ``9890,9893``; each port once."""
    out: list[int] = []
    try:
        for part in raw.replace(" ", "").split(","):
            lo, _, hi = part.partition("-")
            first, last = int(lo), int(hi or lo)
            if not 1 <= first <= last <= 65535:
                raise ValueError(part)
            out += range(first, last + 1)
    except ValueError:
        raise ConfigError(f"FIXLAB_CERTIFY_PORTS={raw!r}: ports 1-65535 as 'A-B' or 'A,B,C'") from None
    if len(set(out)) != len(out):
        raise ConfigError(f"FIXLAB_CERTIFY_PORTS={raw!r}: a port is named twice")
    return tuple(out)


class Refused(Exception):
    """A start the page cannot have: ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status, self.text = status, text


class Run:
    def __init__(self, comp: str, port: int, folder: Path, proc: asyncio.subprocess.Process,
                 host: str = "127.0.0.1", password: str | None = None,
                 fix_version: FixVersion = DEFAULT) -> None:
        self.comp, self.port, self.folder, self.proc = comp, port, folder, proc
        self.version = fix_version
        self.host = host  # where the client connects, as the page says it
        self.password = password  # the one-time password; in the start's answer only (``started``)
        self.started = time.time()
        self.lines: deque[str] = deque(maxlen=LINES)
        self.state = STARTING
        self.code: int | None = None
        self.report: dict[str, Any] | None = None
        self.task: asyncio.Task[None] | None = None

    @property
    def live(self) -> bool:
        return self.state in (STARTING, WAITING)

    @property
    def html(self) -> Path:
        return self.folder / "report.html"

    def view(self, logon_timeout_s: float) -> dict[str, Any]:
        return {"comp_id": self.comp, "state": self.state, "host": self.host, "port": self.port,
                "password_required": self.password is not None,
                "target_comp_id": TARGET, "fix_version": self.version.name,
                "begin_string": self.version.begin_string, "password_field": self.version.password_field,
                "started": round(self.started, 3),
                "logon_timeout_s": logon_timeout_s, "exit_code": self.code, "lines": list(self.lines),
                "message": self.message(logon_timeout_s), "report": self.report,
                "report_html": f"/api/certify/{self.comp}/report.html" if self.html.exists() else None}

    def started_view(self, logon_timeout_s: float) -> dict[str, Any]:
        """The start's answer: the view and the one-time password, for the one who started it."""
        return {**self.view(logon_timeout_s), "password": self.password}

    def message(self, logon_timeout_s: float) -> str:
        where = (f"{self.host}:{self.port} as SenderCompID {self.comp}, TargetCompID {TARGET}, "
                 f"{self.version.wire_name}")
        if self.password is not None:
            where += f", with the run's one-time password in {self.version.password_field}"
        if self.state == STARTING:
            return f"Starting a certification acceptor on {where} ..."
        if self.state == WAITING:
            return f"Point your FIX client at {where}; the run waits {logon_timeout_s:g} s for its Logon."
        if self.state == NO_LOGON:
            return (f"No Logon came as {self.comp} within {logon_timeout_s:g} s: the run ended, "
                    "nothing was judged.")
        if self.state == KILLED:
            return f"The run took too long and was stopped (exit {self.code})."
        if self.state == ERROR:
            last = self.lines[-1] if self.lines else ""
            return f"The run could not start or broke (exit {self.code}): {last}"
        s = (self.report or {}).get("summary", {})
        return (f"{s.get('pass', 0)} passed, {s.get('fail', 0)} failed, {s.get('skip', 0)} skipped: "
                + ("every check passed." if self.state == PASSED else "see the failed checks below."))


class Certifications:
    """The page's certification runs: start, watch, report, and stop them all at shutdown."""

    def __init__(self, settings: CertifySettings) -> None:
        self.settings = settings
        self.runs: dict[str, Run] = {}  # by CompID: the live run, or the last one ended
        self._closing = False
        self._starting = asyncio.Lock()  # two starts at once must not both take a CompID or a port
        self._turn = 0  # ports are taken in turn: one another program holds is not retried at once

    def overview(self) -> dict[str, Any]:
        live = [r for r in self.runs.values() if r.live]
        return {"comps": [{"comp_id": c, "state": self.runs[c].state if c in self.runs else "free",
                           "busy": c in self.runs and self.runs[c].live} for c in COMPS],
                "running": len(live), "runs": min(self.settings.runs, len(self.settings.ports)),
                "fix_versions": [{"name": v.name, "wire": v.wire_name} for v in VERSIONS.values()],
                "default_fix_version": DEFAULT.name,
                "logon_timeout_s": self.settings.logon_timeout_s, "max_s": self.settings.max_s}

    def get(self, comp: str) -> Run:
        if comp not in COMPS:
            raise Refused(404, f"unknown CompID {comp!r}: certification takes {COMPS[0]}..{COMPS[-1]}")
        run = self.runs.get(comp)
        if run is None:
            raise Refused(404, f"{comp} has not been certified since the web started")
        return run

    async def start(self, comp: str, host: str = "", fix_version: str = DEFAULT.name) -> Run:
        """Start ``comp``'s run of ``fix_version`` ("4.2", "4.4", "5.0SP2"); ``host``: the web's name as
        the browser reached it, said as where to connect when runs listen on every interface."""
        async with self._starting:
            return await self._start(comp, host, fix_version)

    async def _start(self, comp: str, host: str = "", fix_version: str = DEFAULT.name) -> Run:
        if comp not in COMPS:
            raise Refused(404, f"unknown CompID {comp!r}: certification takes {COMPS[0]}..{COMPS[-1]}")
        try:
            v = version(fix_version)
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        if self._closing:
            raise Refused(503, "the web is shutting down")
        old = self.runs.get(comp)
        if old is not None and old.live:
            raise Refused(409, f"{comp} is being certified already (port {old.port}): pick another CompID")
        live = [r for r in self.runs.values() if r.live]
        used = {r.port for r in live}
        ports = self.settings.ports[self._turn:] + self.settings.ports[:self._turn]
        free = [p for p in ports if p not in used]
        if len(live) >= self.settings.runs or not free:
            raise Refused(503, f"all {min(self.settings.runs, len(self.settings.ports))} certification "
                               "runs are busy: try again in a minute or two")
        folder = Path(tempfile.mkdtemp(prefix=f"fixlab-certify-{comp}-"))
        listen = self.settings.listen
        password = secrets.token_urlsafe(12) if self.settings.password_needed else None
        extra = ["--listen", listen, "--password-stdin"] if password is not None else ["--listen", listen]
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "services.client.certify", "--comp", comp, "--port", str(free[0]),
                "--fix-version", v.name,
                "--logon-timeout", f"{self.settings.logon_timeout_s:g}",
                "--json", str(folder / "report.json"), "--html", str(folder / "report.html"),
                "--report", str(folder / "report.md"), *extra,
                cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdin=asyncio.subprocess.PIPE if password is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
            if password is not None:
                assert proc.stdin is not None
                proc.stdin.write(password.encode() + b"\n")
                await proc.stdin.drain()
                proc.stdin.close()
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise Refused(500, f"cannot start a certification run: {exc}") from None
        if old is not None:
            shutil.rmtree(old.folder, ignore_errors=True)
        shown = listen if listen not in ("0.0.0.0", "::") else (host or listen)
        run = self.runs[comp] = Run(comp, free[0], folder, proc, shown, password, v)
        self._turn = (self.settings.ports.index(free[0]) + 1) % len(self.settings.ports)
        run.task = asyncio.create_task(self._watch(run), name=f"certify-{comp}")
        log.info("certification of %s (FIX %s) started on port %d (pid %d)", comp, v.name, run.port, proc.pid)
        return run

    async def _watch(self, run: Run) -> None:
        try:
            await asyncio.wait_for(self._follow(run), self.settings.max_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                run.proc.kill()
            run.code = await run.proc.wait()
            run.state = KILLED
            log.warning("certification of %s killed after %g s", run.comp, self.settings.max_s)
            return
        report = run.folder / "report.json"
        if report.exists():
            with contextlib.suppress(OSError, ValueError):
                run.report = json.loads(report.read_text())
        run.state = ENDED.get(run.code, ERROR) if run.code is not None else ERROR
        log.info("certification of %s ended: %s", run.comp, run.state)

    async def _follow(self, run: Run) -> None:
        assert run.proc.stdout is not None
        while line := await run.proc.stdout.readline():
            text = line.decode(errors="replace").rstrip()
            run.lines.append(text)
            if run.state == STARTING and text.startswith("certify: point your client"):
                run.state = WAITING
        run.code = await run.proc.wait()

    async def close(self, timeout_s: float = 1.0) -> None:
        """Kill every live run (its report is of no use once the page is gone) and remove the files."""
        self._closing = True
        live = [r for r in self.runs.values() if r.live]
        for run in live:
            with contextlib.suppress(ProcessLookupError):
                run.proc.kill()
        tasks = [r.task for r in live if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        for run in self.runs.values():
            if run.task is not None:
                run.task.cancel()
            shutil.rmtree(run.folder, ignore_errors=True)


# The command's HTML report is one self-contained page (escaped, inline style, no script).
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'"


def _hostname(host: str) -> str:
    """The name in a Host header, without its port ("[::1]:8000" -> "::1")."""
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else ""
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def mount(app: FastAPI, certs: Certifications, static: Path, origins: frozenset[str]) -> None:
    """The page (/certify) and its JSON API (/api/certify...)."""

    @app.get("/certify", include_in_schema=False)
    async def certify_page() -> FileResponse:
        return FileResponse(static / "certify.html")

    @app.get("/api/certify")
    async def certify_overview() -> JSONResponse:
        return JSONResponse(certs.overview())

    @app.post("/api/certify/{comp}")
    async def certify_start(comp: str, request: Request) -> JSONResponse:
        # Another site's page must not start runs with its visitors' browsers (as for the WebSocket).
        if not origin_allowed(request.headers.get("origin"), request.headers.get("host"), origins):
            return JSONResponse({"error": "this page's origin may not start a certification"}, 403)
        try:
            run = await certs.start(comp, _hostname(request.headers.get("host", "")),
                                    request.query_params.get("fix_version", DEFAULT.name))
        except Refused as exc:
            return JSONResponse({"error": exc.text}, exc.status)
        return JSONResponse(run.started_view(certs.settings.logon_timeout_s), 201,
                            headers={"Cache-Control": "no-store"})

    @app.get("/api/certify/{comp}")
    async def certify_status(comp: str) -> JSONResponse:
        try:
            run = certs.get(comp)
        except Refused as exc:
            return JSONResponse({"error": exc.text}, exc.status)
        return JSONResponse(run.view(certs.settings.logon_timeout_s))

    @app.get("/api/certify/{comp}/report.html", response_model=None)
    async def certify_report(comp: str) -> FileResponse | JSONResponse:
        try:
            run = certs.get(comp)
        except Refused as exc:
            return JSONResponse({"error": exc.text}, exc.status)
        if run.live or not run.html.exists():
            return JSONResponse({"error": f"{comp}'s run has no report (yet)"}, 404)
        return FileResponse(run.html, media_type="text/html", headers={"Content-Security-Policy": REPORT_CSP})
