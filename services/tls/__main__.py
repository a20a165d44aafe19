"""``python -m services.tls``: write stunnel's configuration and become stunnel (the stack supervises it).

It makes the self-signed pair under FIXLAB_RUN_DIR/tls when FIXLAB_TLS_CERT/KEY are not set, writes
stunnel.conf there (one section per gateway: FIXLAB_FIX_TLS_PORT, the next ports for the next
gateways) and execs stunnel in the foreground, so that SIGTERM from the supervisor reaches it and its
log lines (one per connection, one per refused handshake) go to the stack's output.
"""

from __future__ import annotations

import os
import sys

from shared.config import ConfigError
from shared.tls import ensure_self_signed, listeners, server_config, tls_settings


def main() -> int:
    try:
        settings = tls_settings()
        if not settings.enabled:
            raise ConfigError("FIXLAB_FIX_TLS_PORT is not set: no TLS port to serve")
        lsts = listeners(os.environ, settings.port)
        if settings.cert is not None and settings.key is not None:
            cert, key = settings.cert, settings.key
        else:
            cert, key = ensure_self_signed(settings.tls_dir)
        settings.tls_dir.mkdir(parents=True, exist_ok=True)
        text = server_config(lsts, host=settings.host, cert=cert, key=key, source=settings.source)
        tmp = settings.config_path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, settings.config_path)
    except (ConfigError, OSError) as exc:
        print(f"tls: {exc}", file=sys.stderr, flush=True)
        return 2
    for lst in lsts:
        print(f"tls: {settings.host}:{lst.tls_port} (TLS 1.2+) -> 127.0.0.1:{lst.fix_port} from "
              f"{settings.source}; certificate {cert}", flush=True)
    os.execv(settings.stunnel, [settings.stunnel, str(settings.config_path)])
    return 1  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
