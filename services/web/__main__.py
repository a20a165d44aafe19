"""``python -m services.web``: the lab page on FIXLAB_WEB_HOST:FIXLAB_WEB_PORT."""

from __future__ import annotations

import socket
import sys

import uvicorn

from services.web.app import create_app
from services.web.settings import web_settings
from shared import gcpolicy, logs
from shared.config import ConfigError
from shared.fix.dictionary import DictionaryError


def main() -> int:
    logs.setup("web")
    try:
        settings = web_settings()
        app = create_app(settings)
        gc_policy = gcpolicy.policy()
    except (ConfigError, DictionaryError) as exc:
        print(f"web: {exc}", file=sys.stderr)
        return 2
    gcpolicy.apply(gc_policy)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, ws_max_size=settings.ws_max_bytes,
                            log_config=None, access_log=False, timeout_graceful_shutdown=3)
    uvicorn.Server(config).run(sockets=[listening_socket(config, settings.stall_s)])
    return 0


def listening_socket(config: uvicorn.Config, stall_s: int) -> socket.socket:
    """uvicorn's own listening socket, with TCP_USER_TIMEOUT (inherited by every connection it accepts):
    the kernel ends a connection whose peer has acknowledged nothing for ``stall_s`` (a closed window
    too). A page the web dropped for falling behind is sent a close frame, and uvicorn closes its side
    only once what it has to write drained; a peer that never reads would hold that connection open
    for ever, one per attempt, beyond the pages-per-address bound."""
    sock = config.bind_socket()
    if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, stall_s * 1000)
    return sock


if __name__ == "__main__":
    raise SystemExit(main())
