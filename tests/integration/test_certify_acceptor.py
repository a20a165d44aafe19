"""The certification acceptor's engine outlives the object that started it.

``fixlab certify`` never stops its engine (quickfix 1.16.0's stop races the acceptor thread) and ends
the process with ``os._exit`` after ``main`` has returned, so the ``CertAcceptor`` is gone before the
process is: its SocketAcceptor, sessions and director Application must not be freed under the
engine's thread (a fresh-clone run ended a fully passed certification in a segfault, -11, that way).
The child process below does what ``fixlab certify`` does with its acceptor, so that a crash there
kills the child, not the test's worker."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.gateway_stack import ROOT

pytestmark = pytest.mark.integration

CHILD = textwrap.dedent("""
    import gc, os, socket, sys, weakref
    from services.client.certify.acceptor import CertAcceptor

    def run() -> tuple[weakref.ref, int]:  # as main: the acceptor is a local, gone at the return
        acceptor = CertAcceptor("CERT09").start()
        return weakref.ref(acceptor._acceptor), acceptor.port

    engine, port = run()
    gc.collect()
    if engine() is None:
        print("freed: the running engine was freed with its CertAcceptor", flush=True)
        os._exit(3)
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # the engine still listens, on memory that is still its own
    print("alive", flush=True)
    os._exit(0)
""")


def test_a_started_engine_is_not_freed_when_its_acceptor_object_goes() -> None:
    child = subprocess.run([sys.executable, "-X", "faulthandler", "-c", CHILD], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert (child.returncode, child.stdout.strip()) == (0, "alive"), child.stdout + child.stderr
