"""The README's worked example (a plain QuickFIX initiator) against the real gateway and matcher."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.gateway_stack import gateway_stack, matcher_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


def test_readme_example_client_gets_its_order_acknowledged() -> None:
    with gateway_stack(None) as stack:
        out = subprocess.run([sys.executable, "-m", "tools.example_client", "--port",
                              str(stack.fix_port), "--comp", "CLIENT16"],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "35=8|" in out.stdout and "150=0|" in out.stdout and "44=100.00|" in out.stdout
