"""Lab sessions behind a tap: visitors' own FIX initiator sessions, driven over the bus.

``LabManager(redis_url, gateway_id, exchange_host, exchange_port).start()`` runs them; ``stop()``
logs every one out. See the README section "Lab sessions" for how CompIDs are handed out.
"""

from services.gateway.lab.manager import LabManager
from services.gateway.lab.settings import LabSettings

__all__ = ["LabManager", "LabSettings"]
