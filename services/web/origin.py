"""Which pages may open a lab WebSocket: the page's own origin, and the ones configured.

A browser sends ``Origin`` with every WebSocket handshake, and any site's page can open one to any
address its visitor reaches (cookies or not, the lab acts for whoever holds the socket). So a
handshake whose Origin is neither this server's own (the host the request was made to, as the page
it served would have it) nor listed in FIXLAB_WEB_ORIGINS is refused before it is accepted (HTTP
403). A client that sends no Origin is not a browser page (the bench's page, a script): it passes.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def parse_origins(raw: str) -> frozenset[str]:
    """FIXLAB_WEB_ORIGINS: comma-separated ``scheme://host[:port]``; raise ValueError on anything else."""
    out = set()
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
            raise ValueError(f"{item!r} is not an origin (scheme://host[:port])")
        out.add(f"{parts.scheme}://{parts.netloc.lower()}")
    return frozenset(out)


def origin_allowed(origin: str | None, host: str | None, allowed: frozenset[str]) -> bool:
    """True when a handshake with this Origin, made to this Host, may open a lab WebSocket."""
    if origin is None:
        return True  # not a browser: a browser always sends Origin
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False  # "null" (a sandboxed or file page) and anything else that is not an origin
    netloc = parts.netloc.lower()
    if f"{parts.scheme}://{netloc}" in allowed:
        return True
    return host is not None and netloc == host.strip().lower()
