"""tests/gateway_stack.py's start_gateway: a FIX port taken between free_port() and the gateway's
bind (a stressed fresh-clone run: another process listened on it, the stack took that listener for
the gateway, and every logon of the test timed out) gets the gateway started again on another port."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.redis_server import free_port
from tests import gateway_stack
from tests.gateway_stack import FixClient, start_gateway, stop_process

pytestmark = pytest.mark.integration


def test_a_port_taken_before_the_gateway_binds_it_is_replaced(tmp_path: Path, redis_url: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports: Iterator[int] = iter([busy])
        monkeypatch.setattr(gateway_stack, "free_port", lambda: next(ports, None) or free_port())
        env = {**{k: v for k, v in os.environ.items() if k != "FIXLAB_FIX_PORT"}, "REDIS_URL": redis_url,
               "FIXLAB_GATEWAY_ID": "ports", "FIXLAB_LABS": "0", "FIXLAB_RUN_DIR": str(tmp_path / "run")}
        log = tmp_path / "gateway.log"
        proc, port = start_gateway(env, log)
        try:
            assert port != busy
            assert "Address already in use" in log.read_text()  # the first start met the taken port
            with FixClient(port, "CLIENT01") as c:  # the gateway, not the other listener, is there
                c.send("1", [(112, "ports")])
                c.expect("0", lambda m: m.get(112) == "ports")
        finally:
            stop_process(proc)
