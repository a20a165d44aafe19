"""docs/connect.md's session settings, as a user pastes them: each QuickFIX (C++/Python) block logs
on to a real gateway (only the port and the dictionaries' directory put in), and the QuickFIX/J and
QuickFIX/n blocks of the same version name the same session and the same connection."""

from __future__ import annotations

import gc
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.fix.versions import version
from tests.gateway_stack import ROOT, Stack, gateway_stack, matcher_available

fix = pytest.importorskip("quickfix")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

BLOCK = re.compile(r"```ini\n# (?P<engine>QuickFIX[^,]*), FIX (?P<version>[\d.]+(?: SP2)?)[^\n]*\n"
                   r"(?P<body>.*?)```", re.DOTALL)
VERSIONS = {"4.4": "4.4", "4.2": "4.2", "5.0 SP2": "5.0SP2"}
ENGINES = ("QuickFIX (C++/Python)", "QuickFIX/J", "QuickFIX/n")
SESSION_KEYS = ("BeginString", "SenderCompID", "TargetCompID", "DefaultApplVerID")
CONNECTION_KEYS = ("ConnectionType", "SocketConnectHost", "SocketConnectPort", "HeartBtInt",
                   "ResetOnLogon", "UseDataDictionary", "NonStopSession")


def blocks() -> dict[tuple[str, str], str]:
    text = (ROOT / "docs" / "connect.md").read_text(encoding="utf-8")
    return {(m["engine"], VERSIONS[m["version"]]): m["body"] for m in BLOCK.finditer(text)}


def keys(body: str) -> dict[str, str]:
    out = {}
    for line in body.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def test_every_engine_and_version_has_a_block_naming_the_same_session() -> None:
    found = blocks()
    assert set(found) == {(e, v) for e in ENGINES for v in VERSIONS.values()}, sorted(found)
    for v in VERSIONS.values():
        reference = keys(found[("QuickFIX (C++/Python)", v)])
        assert reference["BeginString"] == version(v).begin_string
        assert reference["TargetCompID"] == "FIXLAB"
        for engine in ENGINES[1:]:
            other = keys(found[(engine, v)])
            for key in (*SESSION_KEYS, *CONNECTION_KEYS):
                assert other.get(key) == reference.get(key), (engine, v, key)
            fixt = version(v).fixt
            wanted = {"TransportDataDictionary", "AppDataDictionary"} if fixt else {"DataDictionary"}
            assert wanted <= set(other), (engine, v)


class LogsOn(fix.Application):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.logged_on = threading.Event()

    def onCreate(self, sid: fix.SessionID) -> None: ...
    def onLogout(self, sid: fix.SessionID) -> None: ...
    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None: ...

    def onLogon(self, sid: fix.SessionID) -> None:
        self.logged_on.set()


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


@pytest.mark.parametrize("fix_version", list(VERSIONS.values()))
def test_the_quickfix_block_logs_on_as_pasted(stack: Stack, tmp_path: Path, fix_version: str) -> None:
    v = version(fix_version)
    body = blocks()[("QuickFIX (C++/Python)", fix_version)]
    body = body.replace("SocketConnectPort=9878", f"SocketConnectPort={stack.fix_port}")
    body = body.replace("FileStorePath=store", f"FileStorePath={tmp_path / 'store'}")
    for name, path in ((v.app_file, v.app_dictionary()), (v.transport_file, v.transport_dictionary())):
        if name:
            body = re.sub(rf"=({re.escape(name)})$", f"={path}", body, flags=re.MULTILINE)
    cfg = tmp_path / "client.cfg"
    cfg.write_text(body)
    app = LogsOn()
    settings = fix.SessionSettings(str(cfg))
    initiator = fix.SocketInitiator(app, fix.FileStoreFactory(settings), settings)
    initiator.start()
    try:
        assert app.logged_on.wait(20), f"{fix_version}: did not log on with\n{body}"
    finally:
        initiator.stop()
        del initiator
        gc.collect()  # the stopped Session leaves QuickFIX's registry only when the C++ object goes
