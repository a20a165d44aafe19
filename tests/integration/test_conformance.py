"""QuickFIX's own FIX 4.4 session acceptance definitions, played against the gateway's acceptor.

The definitions are read from ../shared at test time (never copied into the repo); the gateway runs
as a real process with the suite's CompIDs (client TW, acceptor ISLD, ResetOnLogon=Y) added through
its user sessions file, so the code under test is the exchange's own acceptor.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway_stack import gateway_stack
from tools.conformance import Runner, acceptor_sessions_file, session_level_files

pytestmark = pytest.mark.integration

SUITE = Path("conformance") / "quickfix-at-fix44" / "_v1.16.0_TW"


def _definitions() -> list[str]:
    from tests.conftest import SHARED_REFERENCE

    folder = SHARED_REFERENCE / SUITE
    return [p.stem for p in session_level_files(folder)] if folder.is_dir() else ["(suite absent)"]


@pytest.fixture(scope="module")
def runner(shared_reference: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    sessions = tmp_path_factory.mktemp("conformance") / "sessions.cfg"
    sessions.write_text(acceptor_sessions_file("TW", "ISLD"))
    with gateway_stack(None, matcher=False, env={"FIXLAB_FIX_SESSIONS_FILE": str(sessions),
                                                    # QuickFIX's own sequences (6_SendTestRequest
                                                    # expects a disconnect, not our Logout).
                                                    "FIXLAB_SILENT_LOGOUT": "0"}) as stack:
        yield Runner("127.0.0.1", stack.fix_port, timeout_s=20)


def test_the_suite_has_44_session_level_definitions(shared_reference: Path) -> None:
    assert len(session_level_files(shared_reference / SUITE)) == 44


@pytest.mark.parametrize("name", _definitions())
def test_definition(runner: Runner, shared_reference: Path, name: str) -> None:
    path = shared_reference / SUITE / f"{name}.def"
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared is laid beside the repo in CI)")
    result = runner.run_file(path)
    assert result.passed, result.detail
