"""Lab CompIDs claimed atomically in Redis, so no two gateways hand out the same one.

The exchange's acceptor accepts a fixed pool per FIX version (shared.compids: LAB_COMP_IDS and the
FIX 4.2 and FIXT.1.1 ones; one CompIdClaims each). A claim is a key per
CompID, set only if absent, with a TTL its gateway renews while the session lives: a gateway that
dies without releasing loses its claims by itself. A shared cursor hands the pool out in turn, so a
CompID just released is the last to be reused (its old session's end is settled by then).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from shared import streams
from shared.compids import LAB_COMP_IDS

# KEYS: cursor, then one claim key per CompID; ARGV: owner, ttl ms, then the CompIDs.
_CLAIM = """
local n = #KEYS - 1
local start = redis.call('INCR', KEYS[1])
for i = 0, n - 1 do
  local idx = ((start + i - 1) % n) + 1
  if redis.call('SET', KEYS[idx + 1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return ARGV[idx + 2]
  end
end
return false
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class CompIdClaims:
    """Claim, renew and release lab CompIDs of the pool, atomically across gateways."""

    def __init__(self, r: redis.Redis, ttl_s: int, pool: Sequence[str] = LAB_COMP_IDS,
                 cursor_key: str = streams.LAB_COMPID_CURSOR_KEY) -> None:
        self.r = r
        self.ttl_ms = ttl_s * 1000
        self.pool = tuple(pool)
        self._keys = [cursor_key, *(streams.lab_compid_key(c) for c in self.pool)]
        self._claim = r.register_script(_CLAIM)
        self._release = r.register_script(_RELEASE)
        self._renew = r.register_script(_RENEW)

    def claim(self, owner: str) -> str | None:
        """Take the next free CompID of the pool for ``owner``; None when all are taken."""
        got = self._claim(keys=self._keys, args=[owner, self.ttl_ms, *self.pool])
        if got is None:
            return None
        return got.decode() if isinstance(got, bytes) else str(got)

    def release(self, comp_id: str, owner: str) -> bool:
        """Give ``comp_id`` back, only if ``owner`` still holds it."""
        return bool(self._release(keys=[streams.lab_compid_key(comp_id)], args=[owner]))

    def renew(self, comp_id: str, owner: str) -> bool:
        """Extend the claim; False when it lapsed (another gateway may hold the CompID now)."""
        return bool(self._renew(keys=[streams.lab_compid_key(comp_id)], args=[owner, self.ttl_ms]))

    def holder(self, comp_id: str) -> str | None:
        value = self.r.get(streams.lab_compid_key(comp_id))
        return value.decode() if isinstance(value, bytes) else None
