"""The cyclic collector's policy for a long-running service: freeze what start-up built.

Reference counting frees almost every object the moment it is dropped; CPython's cyclic collector is
only for cycles. Yet each of its passes over the older generations walks every tracked object,
including everything start-up built once and keeps for the process's life (imported modules,
QuickFIX's SWIG proxies, dictionaries, configuration): about 35,000 objects in the matcher.
``gc.freeze()`` after start-up moves those out of the collector's view, so its passes walk only what
the service made since. The thresholds stay CPython's: raising the first one (fewer, larger young
passes) was measured slower on the deep book, where resting orders survive each pass.

``FIXLAB_GC`` chooses: ``tuned`` (the default: freeze) or ``default`` (CPython's policy, untouched).
``python -m benchmarks.gcpolicy`` (in ``make bench``) measures both side by side.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping

from shared.config import ConfigError

ENV = "FIXLAB_GC"
TUNED = "tuned"
DEFAULT = "default"


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
