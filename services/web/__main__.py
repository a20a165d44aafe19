"""``python -m services.web``: the lab page on FIXLAB_WEB_HOST:FIXLAB_WEB_PORT."""

from __future__ import annotations

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
    uvicorn.run(app, host=settings.host, port=settings.port, ws_max_size=settings.ws_max_bytes,
                log_config=None, access_log=False, timeout_graceful_shutdown=3)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
