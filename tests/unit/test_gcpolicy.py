"""The collector policy a service applies once started (shared/gcpolicy.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from shared import gcpolicy
from shared.config import ConfigError


def test_the_default_is_tuned_and_default_is_a_choice() -> None:
    assert gcpolicy.policy({}) == gcpolicy.TUNED
    assert gcpolicy.policy({"FIXLAB_GC": " Default "}) == gcpolicy.DEFAULT
    assert gcpolicy.policy({"FIXLAB_GC": ""}) == gcpolicy.TUNED


def test_a_policy_that_does_not_exist_is_a_config_error_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="FIXLAB_GC='off'"):
        gcpolicy.policy({"FIXLAB_GC": "off"})


def _after(choice: str) -> tuple[tuple[int, int, int], int]:
    """The thresholds and the frozen count in a fresh interpreter after apply(choice)."""
    code = ("import gc, json; from shared import gcpolicy; keep = [[] for _ in range(1000)]; "
            f"gcpolicy.apply({choice!r}); print(json.dumps([gc.get_threshold(), gc.get_freeze_count()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    thresholds, frozen = json.loads(out)
    return tuple(thresholds), frozen


def test_tuned_freezes_what_start_up_built_and_raises_the_young_threshold() -> None:
    thresholds, frozen = _after(gcpolicy.TUNED)
    assert thresholds == gcpolicy.TUNED_THRESHOLDS
    assert frozen >= 1000  # at least the lists built before apply


def test_default_leaves_cpythons_policy_alone() -> None:
    thresholds, frozen = _after(gcpolicy.DEFAULT)
    assert thresholds == (700, 10, 10)  # CPython 3.11's own
    assert frozen == 0
