"""The cyclic collector's policy for a long-running service: freeze what start-up built, and run the
young generation's pass less often.

Reference counting frees almost every object the moment it is dropped; CPython's cyclic collector is
only for cycles. By default it still runs a young-generation pass every 700 net allocations of
container objects (an order through the gateway or the matcher allocates dozens), and from time to
time a full pass over every tracked object, including everything start-up built once and keeps for
the process's life (QuickFIX's SWIG proxies, dictionaries, configuration, books). ``gc.freeze()``
moves those out of the collector's view, and a higher first threshold makes the young passes rarer
(each one then costs a little more; the cycles they find are few: our hot paths make none).

``FIXLAB_GC`` chooses: ``tuned`` (the default) or ``default`` (CPython's own policy, untouched).
``make bench`` measures both side by side (``python -m benchmarks.gc``).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping

from shared.config import ConfigError

ENV = "FIXLAB_GC"
TUNED = "tuned"
DEFAULT = "default"
# Young passes every 20,000 net container allocations instead of 700; the older generations keep
# CPython's ratios (10 young passes per middle one, 10 middle per full).
TUNED_THRESHOLDS = (20_000, 10, 10)


class GcPolicyError(ConfigError):
    """FIXLAB_GC names no policy."""


def policy(env: Mapping[str, str] | None = None) -> str:
    """The policy FIXLAB_GC names (raises GcPolicyError for anything else)."""
    value = (os.environ if env is None else env).get(ENV, TUNED).strip().lower() or TUNED
    if value not in (TUNED, DEFAULT):
        raise GcPolicyError(f"{ENV}={value!r}: expected {TUNED!r} or {DEFAULT!r}")
    return value


def apply(chosen: str) -> None:
    """Apply ``policy()``'s choice once start-up is done: what exists now is frozen."""
    if chosen == TUNED:
        gc.collect()
        gc.freeze()
        gc.set_threshold(*TUNED_THRESHOLDS)
