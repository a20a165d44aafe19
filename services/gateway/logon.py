"""The Logon check: a CompID the credentials file names logs on only with its password.

FIX 4.4 and FIXT.1.1 carry the password in Password (554) and optionally Username (553), which must
then be the session's CompID; FIX 4.2 has neither, so a 4.2 Logon carries the password in RawData
(96, with RawDataLength 95), as FIX 4.2 venues did (both are in the Logon of QuickFIX's FIX42.xml).
A CompID with no line in the file logs on as before (the lab's loopback quick start).

A refusal is one generic reason (never which part was wrong), counted toward the lockout
(shared.credentials.Lockout) by CompID; a locked-out CompID is refused whatever its password. The
gate is pure (the clock comes in); the acceptor raises quickfix.RejectLogon with the reason, so the
engine sends the Logout with 58 and nothing of the attempt reaches the bus.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from shared.credentials import Credentials, Lockout

log = logging.getLogger(__name__)

REFUSED = "logon refused: bad credentials"
LOCKED = "logon refused: too many failed logons, try again later"


@dataclass(slots=True)
class LogonGate:
    """Decides each Logon from its CompID, its Username and its password fields."""

    credentials: Credentials
    lockout: Lockout = field(default_factory=Lockout)
    clock: Callable[[], float] = time.monotonic

    def check(self, comp_id: str, username: str | None, password: str | None,
              peer: str = "unknown") -> str | None:
        """None to let the Logon in, else the reason its Logout carries (58)."""
        now = self.clock()
        keys = (f"comp:{comp_id}",)
        if self.lockout.locked(now, *keys):
            log.warning("logon of %s from %s refused: locked out", comp_id, peer)
            return LOCKED
        if comp_id not in self.credentials:
            return None
        ok = self.credentials.verify(comp_id, password or "")
        if ok and username not in (None, "", comp_id):
            ok = False
        if ok:
            return None
        locked = self.lockout.fail(now, *keys)
        log.warning("logon of %s from %s refused: bad credentials%s", comp_id, peer,
                    " (now locked out)" if locked else "")
        return REFUSED
