"""TLS for FIX: stunnel4 in front of the plain acceptor, its certificates, and the clients' contexts.

The quickfix build from PyPI has no SSL (``SSLSocketAcceptor`` exists in the module, but constructing
one fails with ``HAVE_SSL not enabled``), so the exchange's TLS port is an stunnel process: it
terminates TLS 1.2 or newer and connects to the plain acceptor on loopback *from* ``source`` (its
``local`` option, 127.0.0.3 by default). The acceptor thus tells a connection that came over TLS
from one made on the machine itself: the own-address rule (LAB/BOT/BENCH/CERT CompIDs only from
FIXLAB_OWN_ADDRESSES, 127.0.0.1) treats every TLS connection as external (docs/security.md).

Certificates come from files (FIXLAB_TLS_CERT and FIXLAB_TLS_KEY, PEM) or, for a local run, a
self-signed pair made once into ``<run dir>/tls/`` with the openssl command line (CN localhost,
subjectAltName DNS:localhost and IP:127.0.0.1). Clients verify the exchange's certificate against
a CA file (FIXLAB_TLS_CA; for a local run the self-signed certificate itself), or accept any
certificate when told so explicitly (``--tls-insecure``).
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shared.config import (
    ENV_PREFIX,
    ConfigError,
    env_int,
    env_opt_str,
    env_str,
    gateway_count,
    gateway_fix_port,
)

TLS_PORT_ENV = ENV_PREFIX + "FIX_TLS_PORT"
DEFAULT_TLS_PORT = 9898  # what `make run` sets; the code's default is 0, no TLS port
DEFAULT_SOURCE = "127.0.0.3"
STUNNEL_NAMES = ("stunnel4", "stunnel")
# How long stunnel waits for the next bytes of a handshake (or of any busy connection): a peer that
# sends half a ClientHello and goes quiet is cut off after this.
HANDSHAKE_TIMEOUT_S = 10
CERT_DAYS = 365


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The TLS port's settings (``port`` 0: no TLS port)."""

    port: int
    host: str  # where stunnel listens
    cert: Path | None  # None: the self-signed pair under run_dir/tls
    key: Path | None
    source: str  # the loopback address stunnel connects to the acceptor from
    stunnel: str  # its executable ("" when none is installed)
    run_dir: Path

    @property
    def enabled(self) -> bool:
        return self.port != 0

    @property
    def tls_dir(self) -> Path:
        return self.run_dir / "tls"

    @property
    def config_path(self) -> Path:
        return self.tls_dir / "stunnel.conf"


def find_stunnel(env: Mapping[str, str]) -> str:
    """FIXLAB_STUNNEL, else stunnel4 or stunnel on PATH; "" when there is none."""
    named = env_opt_str(env, ENV_PREFIX + "STUNNEL")
    for name in (named,) if named else STUNNEL_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return ""


def tls_port(env: Mapping[str, str]) -> int:
    """FIXLAB_FIX_TLS_PORT: the first gateway's TLS port; 0 (the default): none."""
    return env_int(env, TLS_PORT_ENV, 0, lo=0, hi=65535)


def tls_settings(env: Mapping[str, str] | None = None) -> TlsSettings:
    """Read and check the TLS port's settings; raise ConfigError with one clear line."""
    env = os.environ if env is None else env
    port = tls_port(env)
    cert_raw = env_opt_str(env, ENV_PREFIX + "TLS_CERT")
    key_raw = env_opt_str(env, ENV_PREFIX + "TLS_KEY")
    if bool(cert_raw) != bool(key_raw):
        raise ConfigError("FIXLAB_TLS_CERT and FIXLAB_TLS_KEY go together: set both (PEM files) or neither "
                          "(a self-signed pair is made under FIXLAB_RUN_DIR/tls)")
    cert = Path(cert_raw).resolve() if cert_raw else None
    key = Path(key_raw).resolve() if key_raw else None
    for name, path in (("FIXLAB_TLS_CERT", cert), ("FIXLAB_TLS_KEY", key)):
        if path is not None and not path.is_file():
            raise ConfigError(f"{name}={path} is not a readable file")
    source = env_str(env, ENV_PREFIX + "FIX_TLS_SOURCE", DEFAULT_SOURCE)
    # 127.0.0.1 is where the exchange's own sessions come from: TLS ones must be told apart from them.
    if not source.startswith("127.") or source == "127.0.0.1":
        raise ConfigError(f"FIXLAB_FIX_TLS_SOURCE={source!r} must be a loopback address (127.x.y.z) other "
                          "than the exchange's own (FIXLAB_OWN_ADDRESSES)")
    stunnel = find_stunnel(env)
    if port and not stunnel:
        raise ConfigError(f"{TLS_PORT_ENV}={port} needs stunnel4: `apt-get install stunnel4` (make install "
                          "does), or unset it")
    return TlsSettings(port=port, host=env_str(env, ENV_PREFIX + "FIX_TLS_HOST", "127.0.0.1"), cert=cert,
                       key=key, source=source, stunnel=stunnel,
                       run_dir=Path(env_str(env, ENV_PREFIX + "RUN_DIR", ".run")).resolve())


def ensure_self_signed(directory: Path, days: int = CERT_DAYS) -> tuple[Path, Path]:
    """A self-signed certificate and its key in ``directory`` (made once with openssl, reused after):
    the certificate is also the CA file a local client verifies it with."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    if cert.is_file() and key.is_file():
        return cert, key
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ConfigError("no openssl command to make a self-signed certificate: install openssl, or set "
                          "FIXLAB_TLS_CERT and FIXLAB_TLS_KEY")
    directory.mkdir(parents=True, exist_ok=True)
    tmp_cert, tmp_key = directory / "cert.pem.tmp", directory / "key.pem.tmp"
    proc = subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", str(days), "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(tmp_key), "-out", str(tmp_cert)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise ConfigError(f"openssl could not make a self-signed certificate: {proc.stderr.strip()[-300:]}")
    os.chmod(tmp_key, 0o600)
    os.replace(tmp_key, key)
    os.replace(tmp_cert, cert)
    return cert, key


@dataclass(frozen=True, slots=True)
class Listener:
    """One TLS port and the plain acceptor port it leads to."""

    name: str
    tls_port: int
    fix_port: int


def listeners(env: Mapping[str, str], tls_port: int) -> list[Listener]:
    """One TLS port per gateway the stack runs (FIXLAB_GATEWAYS), in a row from ``tls_port``, each in
    front of that gateway's FIX port (raises ConfigError)."""
    count = gateway_count(env)
    base = env_int(env, ENV_PREFIX + "FIX_PORT", 9878, lo=1, hi=65536 - count)
    if tls_port + count - 1 > 65535:
        raise ConfigError(f"{TLS_PORT_ENV}={tls_port}: {count} TLS ports in a row do not fit below 65536")
    out = [Listener(f"fix-tls-gw{k}", tls_port + k - 1, gateway_fix_port(base, k))
           for k in range(1, count + 1)]
    clash = {x.tls_port for x in out} & {x.fix_port for x in out}
    if clash:
        raise ConfigError(f"{TLS_PORT_ENV}={tls_port} overlaps the FIX port(s) {sorted(clash)}")
    return out


def server_config(listeners: Sequence[Listener], *, host: str, cert: Path, key: Path, source: str) -> str:
    """stunnel's configuration: foreground, logs on stderr, one section per listener."""
    lines = [
        "; written by FIX Lab (shared/tls.py) at each start: edits are lost",
        "foreground = yes",
        "pid =",
        "syslog = no",
        # notice: one line per connection accepted and per refusal (a failed handshake logs at err).
        "debug = notice",
    ]
    for lst in listeners:
        lines += [
            "",
            f"[{lst.name}]",
            f"accept = {host}:{lst.tls_port}",
            f"connect = 127.0.0.1:{lst.fix_port}",
            f"local = {source}",
            f"cert = {cert}",
            f"key = {key}",
            "sslVersionMin = TLSv1.2",
            f"TIMEOUTbusy = {HANDSHAKE_TIMEOUT_S}",
            # Small messages both ways: Nagle would hold each one back for the previous one's ACK.
            "socket = l:TCP_NODELAY=1",
            "socket = r:TCP_NODELAY=1",
        ]
    return "\n".join(lines) + "\n"


def client_config(*, accept_port: int, host: str, port: int, ca_file: Path | None, insecure: bool) -> str:
    """stunnel in client mode: plain on ``127.0.0.1:accept_port``, TLS to ``host:port`` (the bench's
    QuickFIX initiators cannot speak TLS themselves)."""
    lines = ["foreground = yes", "pid =", "syslog = no", "debug = warning", "", "[fix-tls-client]",
             "client = yes", f"accept = 127.0.0.1:{accept_port}", f"connect = {host}:{port}",
             "sslVersionMin = TLSv1.2", "socket = l:TCP_NODELAY=1", "socket = r:TCP_NODELAY=1"]
    if not insecure:
        check = f"checkIP = {host}" if host[0].isdigit() or ":" in host else f"checkHost = {host}"
        lines += ["verifyChain = yes", check]
        lines.append(f"CAfile = {ca_file}" if ca_file else "CApath = /etc/ssl/certs")
    return "\n".join(lines) + "\n"


def default_ca_file(env: Mapping[str, str]) -> Path | None:
    """FIXLAB_TLS_CA; else a local run's self-signed certificate, when there is one; else None (the
    system's CAs)."""
    named = env_opt_str(env, ENV_PREFIX + "TLS_CA")
    if named:
        return Path(named)
    local = Path(env_str(env, ENV_PREFIX + "RUN_DIR", ".run")).resolve() / "tls" / "cert.pem"
    return local if local.is_file() else None


def client_context(ca_file: Path | None = None, *, insecure: bool = False) -> ssl.SSLContext:
    """A client context for TLS 1.2 or newer: verifying against ``ca_file`` (None: the system's CAs),
    or, with ``insecure``, accepting any certificate (a local run's self-signed one, knowingly)."""
    if insecure:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        try:
            ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"TLS CA file {ca_file}: {exc}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class ClientTunnel:
    """stunnel in client mode on a free loopback port, TLS to ``host:port``: for QuickFIX initiators
    (the bench's), which cannot speak TLS themselves. A context manager; ``port`` is where to connect."""

    def __init__(self, workdir: Path, host: str, port: int, *, ca_file: Path | None = None,
                 insecure: bool = False, stunnel: str = "") -> None:
        self.workdir = workdir
        self.host, self.remote_port = host, port
        self.ca_file, self.insecure = ca_file, insecure
        self.stunnel = stunnel or find_stunnel(os.environ)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ClientTunnel:
        if not self.stunnel:
            raise ConfigError("--tls needs stunnel4 for the bench's initiators: `apt-get install stunnel4`")
        self.workdir.mkdir(parents=True, exist_ok=True)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        conf = self.workdir / f"stunnel-client-{self.remote_port}.conf"
        conf.write_text(client_config(accept_port=self.port, host=self.host, port=self.remote_port,
                                      ca_file=self.ca_file, insecure=self.insecure))
        log = (self.workdir / f"stunnel-client-{self.remote_port}.log").open("wb")
        self.proc = subprocess.Popen([self.stunnel, str(conf)], stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise ConfigError(f"stunnel (client) exited with {self.proc.returncode}: see {log.name}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.__exit__()
                    raise ConfigError(f"stunnel (client) did not listen on 127.0.0.1:{self.port}") from None
                time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
