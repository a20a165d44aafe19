"""The bus's consumer loop on several streams of a Redis Cluster, where one command names one slot.

``ClusterMultiStreamConsumer`` does ``LeanMultiStreamConsumer``'s job (shared.bus_lean) with a
consumer and a thread per slot, lean ones on a connection to the slot's master (shared.cluster_node),
or per stream, shared.bus's ``StreamConsumer`` on redis-py's cluster client. ``by_slot`` groups
stream names by slot.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import cast

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from shared.bus import Effects, Entry, Handler, LaneCounters, StreamConsumer
from shared.bus_lean import LeanMultiStreamConsumer
from shared.cluster_node import SlotConnection

log = logging.getLogger(__name__)


class ClusterMultiStreamConsumer(LaneCounters):
    """``LeanMultiStreamConsumer``'s job on a Redis Cluster: one consumer of one group on each stream.

    A cluster refuses a read naming streams of several slots, so each stream gets its own
    ``StreamConsumer`` on redis-py's cluster client (which follows the stream's slot to its node, and
    to a new one after a failover), in a thread of its own, blocking on its stream alone. Each keeps
    the loop's guarantees for its stream: pending entries first, the batch acknowledged with its
    applied id in one transaction in the stream's slot. The handler is called by one thread at a
    time, each stream's batches in order (streams interleave as they arrive).

    ``lean``: each slot's streams get a ``LeanMultiStreamConsumer`` instead, on a lean connection to
    the slot's master (shared.cluster_node.SlotConnection, which follows the slot when it moves): the
    same guarantees, without redis-py's cost per call.
    """

    def __init__(self, r: RedisCluster | redis.Redis, names: Sequence[str], group: str, name: str, *,
                 count: int = 500, block_ms: int = 500, maxlen: int = 1_000_000,
                 wait_replicas: int = 0, lean: bool = False) -> None:
        if not names:
            raise ValueError("no stream to consume")
        self.lanes: list[StreamConsumer | LeanMultiStreamConsumer]
        if lean and wait_replicas <= 0 and isinstance(r, RedisCluster):
            self.lanes = [LeanMultiStreamConsumer(cast(redis.Redis, r), SlotConnection(r, in_slot[0]),
                                                  in_slot, group, name, count=count, block_ms=block_ms,
                                                  maxlen=maxlen)
                          for in_slot in by_slot(names)]
        else:
            self.lanes = [StreamConsumer(cast(redis.Redis, r), stream, group, name, count=count,
                                         block_ms=block_ms, maxlen=maxlen, wait_replicas=wait_replicas)
                          for stream in names]
        self._lock = threading.Lock()

    def run(self, handle: Handler, stop: threading.Event) -> None:
        """Read, handle and acknowledge every stream until ``stop`` is set."""
        def one_at_a_time(batch: list[Entry]) -> Effects | None:
            with self._lock:
                return handle(batch)

        threads = [threading.Thread(target=self._lane, args=(lane, one_at_a_time, stop),
                                    name=f"{threading.current_thread().name}-{i}", daemon=True)
                   for i, lane in enumerate(self.lanes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    @staticmethod
    def _lane(lane: StreamConsumer | LeanMultiStreamConsumer, handle: Handler, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                lane.run(handle, stop)
            except Exception:  # an error reply the loop does not retry: this stream only, again soon
                what = lane.stream if isinstance(lane, StreamConsumer) else ", ".join(
                    x.stream for x in lane.lanes)
                log.exception("consumer of %s: unexpected error; reading again in 1 s", what)
                stop.wait(1.0)


def by_slot(names: Sequence[str]) -> list[list[str]]:
    """``names`` grouped by cluster slot, in order of first appearance (one read may name one slot)."""
    groups: dict[int, list[str]] = {}
    for stream in names:
        groups.setdefault(key_slot(stream.encode()), []).append(stream)
    return list(groups.values())
