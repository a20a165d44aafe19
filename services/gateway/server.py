"""The gateway assembled: QuickFIX acceptor, intake publisher process, events thread, health, labs."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import quickfix as fix

from services.gateway.acceptor import Counters, GatewayApp, SessionRegistry
from services.gateway.config import GatewaySettings
from services.gateway.dialects import dialects
from services.gateway.direct import DirectIntake
from services.gateway.dropcopy import DropCopy
from services.gateway.endofday import EndOfDayClock
from services.gateway.guard import Guard
from services.gateway.handoff import Handoff
from services.gateway.inbound import HANDLED_TYPES, Inbound
from services.gateway.intake import Publisher
from services.gateway.killswitch import KillSwitch
from services.gateway.lab import LabManager
from services.gateway.lab.session import SetStp
from services.gateway.lasttrade import LastTrades
from services.gateway.logon import LogonGate
from services.gateway.mdfeed import GroupSender, MarketFeed
from services.gateway.outbound import Outbound
from services.gateway.phasedriver import PhaseDriver
from services.gateway.reports import ReportSender
from services.gateway.resp import RespConnection
from services.gateway.risk import RiskBook
from services.gateway.sessions import (
    cancel_on_disconnect_sessions,
    drop_copy_sessions,
    firm_of,
    load_firms,
    load_sessions,
    settings_text,
    stp_modes,
    trd_match_sessions,
)
from services.gateway.silence import SilenceWatchdog
from services.gateway.slots import ClusterIntake
from services.gateway.stalled import StallWatch
from services.gateway.untold import Untold
from shared.bus import connect
from shared.clock import now_ns
from shared.config import ConfigError
from shared.credentials import CredentialsError, Lockout
from shared.credentials import from_env as credentials_from_env
from shared.fix.dictionary import (
    EXCHANGE_MESSAGES,
    READ_GROUPS,
    RECEIVED_MESSAGES,
    WRITTEN,
    Dictionary,
    DictionaryError,
    load,
    message_types,
    write_acceptor_dictionary,
    write_exchange_dictionary,
    write_fixt_transport_dictionary,
)
from shared.fix.versions import VERSIONS, FixVersion
from shared.health import HealthReporter
from shared.operator import Verifier, load_token
from shared.redis_cluster import cluster_client, is_cluster_url
from shared.schema import STP_OFF, SessionEnded, StpSetting

log = logging.getLogger(__name__)

SWEEP_WAIT_S = 10.0
LOGOUT_WAIT_S = 10.0  # as long as QuickFIX's own Acceptor.stop waits for its sessions' Logouts
# What the gateway sends besides the session level: stored, and resent as stored, with the acceptor's
# dictionary (ExecutionReport, OrderCancelReject, BusinessMessageReject).
SENT_TYPES = frozenset({"8", "9", "j"})


def acceptor_types(dictionary: Dictionary) -> frozenset[str]:
    """The messages the acceptor's dictionary keeps: session level, what is handled, what is sent."""
    session = {t for t, m in dictionary.messages.items() if m.category == "session"}
    return frozenset(session | HANDLED_TYPES | SENT_TYPES | EXCHANGE_MESSAGES)


class VersionDictionaries:
    """The dictionaries of a version other than FIX 4.4 the acceptor's sessions use, written at start.

    As FIX 4.4's: the installed file trimmed to the messages the exchange speaks (the ones this
    version defines), what it only sends slimmed to what it writes; a version whose table says so
    (FIX 5.0 SP2) keeps in what a client sends only what it requires and what FIX 4.4 lists there,
    its repeating groups included (shared.fix.versions says why).
    """

    def __init__(self, version: FixVersion, directory: Path, fix44: Dictionary, trim: bool) -> None:
        self.version = version
        self.types = message_types(version.app_dictionary())  # what it defines (BusinessMessageReject)
        types = acceptor_types(fix44) & self.types
        written: dict[str, frozenset[int]] = {t: tags for t, tags in WRITTEN.items() if t in types}
        if version.received_as_fix44:
            # FIX 4.4's shape of each: its fields and its groups with the fields FIX 4.4 lists in
            # them, so that QuickFIX knows the groups a client may send there and counts their
            # entries (373=16, Incorrect NumInGroup count); 5.0 SP2's own additions stay out.
            written.update({t: fix44.bodies[t] | READ_GROUPS.get(t, frozenset())
                            for t in RECEIVED_MESSAGES if t in types})
        stem = f"FIXLAB-{version.name}"
        self.app = (write_acceptor_dictionary(directory / f"{stem}-acceptor.xml", version.app_dictionary(),
                                              types, written) if trim else version.app_dictionary())
        # Tags and enums of each message, for the version's dialect: from the acceptor's (small) copy
        # (FIX 5.0 SP2's whole dictionary, parsed, holds ~34 MiB of Python objects).
        self.parsed = load(str(self.app)) if version.rewrites else None
        self.settings: dict[str, str]
        if version.fixt:
            session_types = message_types(version.transport_dictionary())
            # ApplVerID limited to 9: a message naming another version gets the engine's own Reject.
            self.transport = write_fixt_transport_dictionary(
                directory / f"{stem}-transport.xml", version.transport_dictionary(), session_types,
                version.default_appl_ver_id or "")
            self.settings = version.dictionary_settings(self.app, self.transport)
        else:
            self.settings = version.dictionary_settings(self.app)


def resident_mib() -> int:
    """This process's resident memory (VmRSS), in MiB; 0 where /proc cannot tell."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Gateway:
    """Start with ``start()``, stop with ``stop()`` (Logout to every session, then flush and stop)."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        common = settings.common
        specs = load_sessions(settings.sessions_file, settings.comp_ids)
        self.session_count = len(specs)
        base = settings.run_dir / "gateway" / settings.gateway_id
        base.mkdir(parents=True, exist_ok=True)
        store_dir = settings.store_dir if settings.store == "file" else None
        if store_dir is not None:
            store_dir.mkdir(parents=True, exist_ok=True)
        # The exchange's own dictionary (FIX44.xml + TrdMatchID in ExecutionReport), derived afresh
        # from the installed file at every start; clients validate what we send with the same file.
        # The acceptor's sessions validate with that file trimmed to the messages the exchange speaks:
        # QuickFIX copies the dictionary into each session (the whole file: ~2.4 MiB, ~1 GiB in all).
        try:
            self.dictionary = write_exchange_dictionary(settings.dictionary_path, settings.data_dictionary)
            exchange = load(str(self.dictionary))
            self.acceptor_dictionary = (write_acceptor_dictionary(
                settings.acceptor_dictionary_path, self.dictionary, acceptor_types(exchange), WRITTEN)
                if settings.trim_dictionary else self.dictionary)
            # FIX 4.2 and FIXT.1.1 / FIX 5.0 SP2 (shared.fix.versions), for the versions configured.
            begins = {spec.begin for spec in specs}
            self.versions = {v.begin_string: VersionDictionaries(v, base, exchange, settings.trim_dictionary)
                             for v in VERSIONS.values() if v.name != "4.4" and v.begin_string in begins}
        except (DictionaryError, OSError) as exc:
            raise ConfigError(str(exc)) from None
        self.settings_path = base / "acceptor.cfg"
        self.settings_path.write_text(settings_text(
            specs, port=settings.fix_port, host=settings.fix_host,
            data_dictionary=self.acceptor_dictionary, store_dir=store_dir,
            version_settings={begin: v.settings for begin, v in self.versions.items()},
            own_addresses=settings.own_addresses))
        # Exec ids of the gateway's own refusals must not repeat across restarts.
        prefix = f"{settings.gateway_id}-{int(time.time() * 1000):x}"
        self.inbound = Inbound(common.instruments, settings.gateway_id, prefix)  # the acceptor's "busy"
        self.outbound = Outbound(common.instruments, trd_match_sessions(specs))
        self.registry = SessionRegistry(dialects({b: (v.version, v.parsed) for b, v in self.versions.items()
                                                   if v.parsed is not None}))
        self.counters = Counters()
        # Received orders go to a publisher process over a pipe (handoff.py says why); the orders it
        # refuses are answered on the events stream. Bounded: records not yet on the bus.
        self.handoff = Handoff(prefix, max_pending=settings.queue_max)
        self.silence = SilenceWatchdog(settings.silent_logout) if settings.silent_logout > 0 else None
        self.stall = (StallWatch(settings.fix_port, settings.stall_bytes, settings.stall_s)
                      if settings.stall_s > 0 else None)
        self.cancel_on_disconnect = cancel_on_disconnect_sessions(specs)
        self.stp_configured = stp_modes(specs)  # the sessions file's; the lab page changes its own
        # On a Redis Cluster: redis-py's cluster client where one Redis has a lean connection, every
        # transaction in one slot (services.gateway.slots, shared.bus_cluster.ClusterMultiStreamConsumer).
        self.cluster = is_cluster_url(common.redis_url)
        # The light-load shortcut: its own lean connection, short time-outs (it runs on the engine
        # thread), the same Publisher as the publisher process, no done count (no records).
        writer = (ClusterIntake(cluster_client(common.redis_url, timeout_s=0.2), {},
                                wait_replicas=common.wait_replicas, wait_ms=100, lean=common.cluster_lean,
                                timeout_s=0.2) if self.cluster
                  else RespConnection(common.redis_url, timeout_s=0.2))
        self.direct = (DirectIntake(Publisher(writer,
                                              Inbound(common.instruments, settings.gateway_id, prefix + "d",
                                                      stp_modes(specs)),
                                              common.instruments, common.stream_maxlen, ""),
                                    idle_s=settings.direct_idle_s, slow_s=settings.direct_slow_s)
                       if settings.direct_idle_s > 0 else None)
        # Market data (V/W/X/Y): idle until a session asks (mdfeed.py).
        group_dictionaries = {begin: v.app for begin, v in self.versions.items()}
        self.market = MarketFeed(common.redis_url, common.instruments, settings.gateway_id,
                                 GroupSender(self.registry.get, self.acceptor_dictionary, group_dictionaries,
                                             self.registry.profile),
                                 interval_s=settings.md_interval_s,
                                 max_trades=settings.md_max_trades, maxlen=common.stream_maxlen)
        try:  # FIXLAB_CREDENTIALS: the CompIDs it names log on with their password (logon.py)
            creds = credentials_from_env()
            gate = LogonGate(creds, Lockout.from_env()) if creds is not None else None
        except CredentialsError as exc:
            raise ConfigError(str(exc)) from None
        self.app = GatewayApp(self.inbound, self.handoff, self.registry, self.counters,
                              silence=self.silence, cancel_on_disconnect=self.cancel_on_disconnect,
                              direct=self.direct, fix44_types=frozenset(exchange.messages),
                              version_types={begin: v.types for begin, v in self.versions.items()},
                              appl_ver_ids={begin: v.version.default_appl_ver_id or ""
                                            for begin, v in self.versions.items() if v.version.fixt},
                              market_data=self.market,
                              # Its own dictionary copy: the market-data thread parses with the other.
                              send_groups=GroupSender(self.registry.get, self.acceptor_dictionary,
                                                      group_dictionaries, self.registry.profile),
                              logon_gate=gate)
        self.end_of_day = EndOfDayClock(settings.end_of_day, self.handoff.send_command)
        self.phases = (None if settings.schedule is None
                       else PhaseDriver(settings.schedule, self.handoff.send_command))
        # The sweep's Cancelled reports, for sessions that keep their identity across Logons (their
        # sequence numbers), told at their next Logon (untold.py).
        told = frozenset(s.target for s in specs if s.options.get("ResetOnLogon", "N") == "N"
                         and s.cancel_on_disconnect)
        self.untold = Untold(connect(common.redis_url), settings.gateway_id, told, self.registry.send)
        self.app.on_logon = self.untold.logged_on
        self.reports = ReportSender(connect(common.redis_url),
                                    None if self.cluster else RespConnection(common.redis_url),
                                    settings.gateway_id, common.shards, self.outbound,
                                    self.registry, self.counters, wait_replicas=common.wait_replicas,
                                    lean=self.cluster and common.cluster_lean, untold=self.untold)
        # Risk limits, the kill switch and drop copy (risk.py, guard.py, killswitch.py, dropcopy.py).
        firms = load_firms(settings.sessions_file)
        members = firm_of(specs, firms)
        drop_copies = drop_copy_sessions(specs)
        self.risk = RiskBook(common.instruments, {s.target: s.limits for s in specs},
                             {name: f.limits for name, f in firms.items()}, members)
        self.guard = Guard(self.inbound, self.risk, now_ns, drop_copies)
        self.app.guard = self.guard
        if self.risk.watched:
            self.reports.observe = self.risk.on_event
        self.last_trades = (LastTrades(connect(common.redis_url), common.shards, self.risk.trade)
                            if self.risk.collars else None)
        self.killswitch = KillSwitch(connect(common.redis_url), settings.gateway_id, Verifier(load_token()),
                                     holds=self._holds, kill=self.guard.kill, unkill=self.guard.unkill,
                                     send_command=self.handoff.send_command)
        self.reports.kill_report = self.killswitch.mass_cancel_report
        self.dropcopy = DropCopy(connect(common.redis_url), members, drop_copies, send=self.registry.send,
                                 logged_on=self.registry.is_logged_on,
                                 begin_string=self.registry.begin_string, holds=self._holds,
                                 trd_match=trd_match_sessions(specs), maxlen=common.stream_maxlen)
        if self.dropcopy.active:
            self.reports.copy = self.dropcopy.keep
            self.app.copy = self.dropcopy.copy
        self.health = HealthReporter(connect(common.redis_url), "gateway", settings.gateway_id,
                                     self.health_counters)
        self.labs: LabManager | None = None
        self._fix_settings = fix.SessionSettings(str(self.settings_path))
        store: Any = (fix.FileStoreFactory(self._fix_settings) if store_dir is not None
                      else fix.MemoryStoreFactory())
        self._store = store
        self.acceptor = fix.SocketAcceptor(self.app, store, self._fix_settings)

    def _holds(self, comp: str) -> bool:
        """Whether this gateway's acceptor has ``comp``'s session."""
        return self.registry.get(comp) is not None

    def health_counters(self) -> dict[str, int | str]:
        c = self.counters
        p = self.handoff.stats
        return {
            "fix_port": self.settings.fix_port,
            "sessions_configured": self.session_count,
            "rss_mib": resident_mib(),
            "sessions_logged_on": len(self.registry.logged_on()),
            "logons": c.logons,
            "orders_in": c.orders_in,
            "refused": p.refused + (self.direct.publisher.refused if self.direct else 0),
            "busy": c.busy,
            "published": p.published + (self.direct.publisher.published if self.direct else 0),
            "direct": self.direct.published if self.direct else 0,
            "direct_fallbacks": self.direct.fallbacks if self.direct else 0,
            "direct_slow": self.direct.slow if self.direct else 0,
            "queue_depth": self.handoff.waiting,
            "publisher_restarts": p.restarts,
            "reports_out": c.reports_out,
            "unroutable": c.unroutable,
            "callback_errors": c.callback_errors + p.errors + p.bad_reports,
            "silent_logouts": self.silence.logouts if self.silence is not None else 0,
            "stalled_readers_cut": self.stall.cut if self.stall is not None else 0,
            "untold_kept": self.untold.kept,
            "untold_told": self.untold.told,
            "labs": "on" if self.labs is not None else "off",
            "risk_refused": self.risk.refused,
            "killed": len(self.guard.killed),
            "admin_refused": self.killswitch.refused,
            "dropcopy_written": self.dropcopy.written,
            "dropcopy_told": self.dropcopy.told,
            **self.market.stats(),
        }

    def start(self) -> Gateway:
        self.handoff.start()
        self.end_sessions_left_open()
        self.end_of_day.start()  # the latest day that ended, if no one said so yet
        if self.phases is not None:
            self.phases.start()  # each instrument into the phase the schedule says it is in now
        self.untold.start()
        self.killswitch.load()  # killed sessions stay killed: before the first Logon
        self.killswitch.start()
        self.reports.start()
        self.dropcopy.start()
        if self.last_trades is not None:
            self.last_trades.start()
        self.market.start()
        if self.silence is not None:
            self.silence.start()
        self.acceptor.start()
        if self.stall is not None:
            self.stall.start()
        log.info("FIX acceptor listening on %s:%d (%d sessions, SenderCompID FIXLAB)",
                 self.settings.fix_host, self.settings.fix_port, self.session_count)
        if self.settings.labs:
            # Lab sessions of FIX 4.2 and 5.0 SP2 validate with the acceptor's own files of their
            # version: FIX50SP2.xml whole costs ~56 MiB per session in this process, the trimmed ~1.
            self.labs = start_labs(self.settings, self.set_stp,
                                   {v.version.name: v.settings for v in self.versions.values()})
        self.health.start()
        return self

    def set_stp(self, session: str, mode: int | None) -> None:
        """Set a session's self-trade prevention where its orders are translated: the publisher
        process (a record on the pipe, in order with the orders before it) and the engine thread's
        shortcut. ``None`` puts back the sessions file's mode. (A publisher restarted after a crash
        starts again from the sessions file.)"""
        value = self.stp_configured.get(session, STP_OFF) if mode is None else mode
        self.handoff.send_command(StpSetting(session, value, now_ns()))
        if self.direct is not None:
            self.direct.publisher.inbound.set_stp(session, value)

    def end_sessions_left_open(self) -> None:
        """End every CancelOnDisconnect session, before any Logon: what a previous life left resting.

        A gateway killed (or a machine that lost power) never said its sessions ended, nor did one
        whose Redis stopped first. The pipe keeps order, so these reach the matchers before any new
        session's orders; a session with nothing resting costs the matcher a dictionary lookup.
        """
        ts = now_ns()
        reply_to = self.inbound.reply_to
        for comp in sorted(self.cancel_on_disconnect):
            self.handoff.send_command(SessionEnded(comp, reply_to, ts))
        # Wait (a little) until they are on the bus: order does not need it, the pipe keeps it, but
        # they would count against FIXLAB_GATEWAY_QUEUE and refuse the first orders as "busy".
        deadline = time.monotonic() + SWEEP_WAIT_S
        while self.handoff.waiting and time.monotonic() < deadline:
            time.sleep(0.01)
        log.info("ended %d sessions a previous run may have left open%s", len(self.cancel_on_disconnect),
                 f" ({self.handoff.waiting} records not yet on the bus)" if self.handoff.waiting else "")

    def log_out_all(self) -> None:
        """Send every session a Logout and wait, LOGOUT_WAIT_S at most, until each has logged out and
        its onLogout has handed over its SessionEnded: the first half of QuickFIX's Acceptor.stop
        (logout() also disables a session: a Logon now is refused). Not its second half (stop the
        engine's thread, close its sockets): quickfix 1.16.0 races its acceptor thread there, and a
        SIGTERM'd gateway segfaulted in it (-11, a stressed fresh-clone run of test_gateway_resilience),
        as certify and the bench baseline had. The process ends with os._exit, and the engine with it."""
        for sid in self.registry.ids():
            session = fix.Session.lookupSession(sid)
            if session is not None and session.isEnabled():
                session.logout()
        deadline = time.monotonic() + LOGOUT_WAIT_S
        while (self.registry.logged_on() or self.app.logging_out or self.acceptor.isLoggedOn()) \
                and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self) -> None:
        self.end_of_day.stop()
        if self.phases is not None:
            self.phases.stop()
        if self.labs is not None:
            try:
                self.labs.stop()
            except Exception:
                log.exception("lab manager did not stop cleanly")
        if self.stall is not None:
            self.stall.stop()
        if self.silence is not None:
            self.silence.stop()  # before the acceptor: it calls into the acceptor's Sessions
        # Logout to every session; each onLogout hands a SessionEnded the publisher still publishes.
        self.log_out_all()
        self.market.stop()
        self.handoff.stop()
        self.reports.stop()
        self.untold.stop()
        self.killswitch.stop()
        self.dropcopy.stop()
        if self.last_trades is not None:
            self.last_trades.stop()
        self.health.stop()
        log.info("gateway stopped: %d commands published, %d reports sent",
                 self.handoff.stats.published, self.counters.reports_out)


def start_labs(settings: GatewaySettings, set_stp: SetStp | None = None,
               dictionaries: Mapping[str, Mapping[str, str]] | None = None) -> LabManager | None:
    """Start the lab manager; a failure leaves the acceptor running without labs."""
    try:
        manager = LabManager(settings.common.redis_url, settings.gateway_id, "127.0.0.1", settings.fix_port,
                             set_stp=set_stp, comp_ids=settings.comp_ids.labs,
                             version_comp_ids=settings.comp_ids.lab_pools(),
                             version_dictionaries=dictionaries)
        manager.start()
    except Exception:
        log.exception("lab manager failed to start; the acceptor runs without labs")
        return None
    return manager

