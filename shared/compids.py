"""The CompIDs the exchange accepts out of the box (QuickFIX C++ has no dynamic acceptor sessions).

Every session is configured in the acceptor in advance, as a real exchange provisions its members'
CompIDs. A user adds more in a QuickFIX settings file (see the gateway's README section).
"""

from __future__ import annotations

EXCHANGE_COMP_ID = "FIXLAB"
BEGIN_STRING = "FIX.4.4"

CLIENT_COMP_IDS = tuple(f"CLIENT{n:02d}" for n in range(1, 17))  # people's own FIX clients
BENCH_COMP_IDS = tuple(f"BENCH{n:03d}" for n in range(1, 257))  # the bench
BOT_COMP_IDS = tuple(f"BOT{n:02d}" for n in range(1, 9))  # liquidity bots of the lab page
LAB_COMP_IDS = tuple(f"LAB{n:03d}" for n in range(1, 65))  # visitors' lab sessions, handed out in turn
