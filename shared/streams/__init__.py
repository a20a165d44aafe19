"""Every Redis stream, group and key name of FIX Lab. No other module spells one.

Names carry a Redis Cluster hash tag in braces: everything one matcher shard reads and writes in one
transaction shares the slot of ``{shard-N}`` (see deploy/SCALING.md). Its orders stream, snapshot,
lease, events for each gateway (``shard_events_stream``), market data (``shard_market_stream``) and
dead letters (``shard_deadletter_stream``) all carry it, so every matcher commit touches one slot,
on one Redis as on a cluster. Readers of events and market data therefore follow one stream per
shard (the shards come from the instruments, ``CommonSettings.shards``); a gateway also reads its
own ``events_stream``, where its intake publishes its refusals.
"""

from __future__ import annotations

PREFIX = "fixlab"

# Consumer groups.
MATCHER_GROUP = "matcher"
GATEWAY_GROUP = "gateway"

# Field of a stream entry that holds a msgpack batch of messages.
BATCH_FIELD = b"b"


def orders_stream(shard: str) -> str:
    """Commands for one matcher shard (NewOrder, CancelOrder, ReplaceOrder, SessionEnded)."""
    return f"{PREFIX}:{{shard-{shard}}}:orders"


def snapshot_key(shard: str) -> str:
    """The matcher shard's latest book snapshot and the last orders-stream id it covers."""
    return f"{PREFIX}:{{shard-{shard}}}:snapshot"


def events_stream(gateway_id: str) -> str:
    """Events a gateway publishes for its own sessions (its intake's refusals), in the gateway's slot.

    The matchers answer on ``shard_events_stream``: each command names its gateway (reply_to).
    """
    return f"{PREFIX}:{{gw-{gateway_id}}}:events"


def shard_market_stream(shard: str) -> str:
    """One matcher shard's market data, in the shard's slot: Trade and Depth (for the web page),
    BookUpdate and BookImage (for the gateways' FIX market data)."""
    return f"{PREFIX}:{{shard-{shard}}}:market"


def shard_deadletter_stream(shard: str) -> str:
    """Commands one matcher shard could not decode or apply, kept for a person, in the shard's slot."""
    return f"{PREFIX}:{{shard-{shard}}}:deadletter"


LAB_START_STREAM = f"{PREFIX}:lab:start"  # LabStart: any gateway (group GATEWAY_GROUP) takes it


def lab_commands_stream(gateway_id: str) -> str:
    """LabCommand for the lab sessions one gateway holds (its id is in every LabState)."""
    return f"{PREFIX}:{{gw-{gateway_id}}}:lab"


def lab_stream(lab_id: str) -> str:
    """One lab session's wire (WireRecord), state (LabState) and notices (LabNotice), in order."""
    return f"{PREFIX}:lab:{lab_id}"


def intake_done_key(gateway_id: str, run: str) -> str:
    """How many received records one gateway run's intake publisher has put on the bus (or refused)."""
    return f"{PREFIX}:{{gw-{gateway_id}}}:intake:{run}"


def shard_intake_done_key(shard: str, gateway_id: str, run: str) -> str:
    """On a Redis Cluster: how many received records one gateway run's intake has put on one shard's
    orders stream, in the shard's slot (set in the same transaction as those orders)."""
    return f"{PREFIX}:{{shard-{shard}}}:intake:{gateway_id}:{run}"


def untold_key(gateway_id: str, session: str) -> str:
    """A list of the ExecutionReports (FIX 4.4 bodies) one session of that gateway was not logged on to
    hear: the Cancelled of its orders that the start-up sweep (or its end) cancelled, told at its next
    Logon (services/gateway/untold.py)."""
    return f"{PREFIX}:{{gw-{gateway_id}}}:untold:{session}"


# AdminCommand: every service that acts on operator commands reads all of it (XREAD, no group).
ADMIN_STREAM = f"{PREFIX}:admin"
# A set: the CompIDs the operator killed (fixlab admin kill), kept until unkill (and across restarts).
KILLED_KEY = f"{PREFIX}:killed"


def admin_answers_stream(req_id: str) -> str:
    """The answers (AdminAnswer) to one operator command, read by the ``fixlab admin`` that sent it."""
    return f"{PREFIX}:admin:answers:{req_id}"


def dropcopy_stream(firm: str) -> str:
    """Every ExecutionReport (CopiedReport) of a firm's sessions, in the order told, for its drop copy
    sessions (any gateway writes, the one holding the drop copy session reads)."""
    return f"{PREFIX}:{{dropcopy-{firm}}}:reports"


def dropcopy_told_key(firm: str, comp_id: str) -> str:
    """The last entry of ``dropcopy_stream(firm)`` one drop copy session was sent (its cursor)."""
    return f"{PREFIX}:{{dropcopy-{firm}}}:told:{comp_id}"


def health_key(service: str, instance: str) -> str:
    """A service instance's heartbeat and counters (a hash with a TTL)."""
    return f"{PREFIX}:health:{service}:{instance}"


def bench_barrier_key(run_id: str) -> str:
    return f"{PREFIX}:bench:{run_id}:barrier"


def bench_results_stream(run_id: str) -> str:
    return f"{PREFIX}:bench:{run_id}:results"


# Entries a consumer other than a matcher could not decode, kept for a person (a matcher writes its
# own in its slot: shard_deadletter_stream).
DEADLETTER_STREAM = f"{PREFIX}:deadletter"


def applied_key(stream: str, group: str) -> str:
    """The last entry id whose effects a group's consumer published (see shared.bus), in the stream's
    slot: it is set in the transaction that acknowledges the stream's entries, which a Redis Cluster
    keeps to one slot. A stream without a hash tag (``LAB_START_STREAM``) lends its whole name."""
    if "{" in stream:
        return f"{stream}:applied:{group}"
    return f"{{{stream}}}:applied:{group}"


def replica_probe_key(stream: str) -> str:
    """A key in the stream's slot that a consumer waiting for replicas writes just before its WAIT
    (shared.replication): WAIT covers what its own connection wrote, and a blocking read served by
    another client's write does not count as one."""
    if "{" in stream:
        return f"{stream}:replica-probe"
    return f"{{{stream}}}:replica-probe"


def bench_compids_key(run_id: str) -> str:
    """A counter bench instances INCRBY to claim distinct CompIDs from the BENCH pool."""
    return f"{PREFIX}:bench:{run_id}:compids"


def bench_instances_key(run_id: str) -> str:
    """A counter bench instances INCR to take distinct instance numbers (0, 1, ...)."""
    return f"{PREFIX}:bench:{run_id}:instances"


# The web's key for resume tokens (HMAC of a lab_id): kept in Redis so that a restarted web
# recognises the tokens the one before it gave its pages.
WEB_RESUME_SECRET_KEY = f"{PREFIX}:web:resume-secret"

# Lab CompID claims (services.gateway.lab.claims): one key per claimed CompID, all in one slot.
LAB_COMPID_CURSOR_KEY = f"{PREFIX}:{{lab-compids}}:cursor"


def lab_compid_cursor_key(fix_version: str) -> str:
    """The claims' cursor of one version's lab CompIDs ("4.4": the one before versions came)."""
    return LAB_COMPID_CURSOR_KEY if fix_version == "4.4" else f"{LAB_COMPID_CURSOR_KEY}:{fix_version}"


def lab_compid_key(comp_id: str) -> str:
    """Who holds a lab CompID now ("gateway_id:lab_id"), with a TTL its gateway keeps renewing."""
    return f"{PREFIX}:{{lab-compids}}:{comp_id}"


def shard_events_stream(shard: str, gateway_id: str) -> str:
    """Events of one matcher shard for one gateway (reply_to), in the shard's hash slot: the
    matcher's publish-and-acknowledge MULTI touches one slot only (deploy/SCALING.md)."""
    return f"{PREFIX}:{{shard-{shard}}}:events:{gateway_id}"


def matcher_lease_key(shard: str) -> str:
    """Which matcher process owns a shard now ("host:pid"), with a TTL the owner keeps renewing."""
    return f"{PREFIX}:{{shard-{shard}}}:lease"
