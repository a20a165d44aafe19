"""QuickFIX's own session acceptance definitions for FIX 4.2, FIX 4.4 and FIX 5.0 SP2, played against
the gateway's acceptor.

The definitions are read from ../shared at test time (never copied into the repo); the gateway runs
as a real process with each suite's CompIDs (clients TW, TW42 and TW50SP2, acceptor ISLD,
ResetOnLogon=Y) added through its user sessions file, so the code under test is the exchange's own
acceptor, with the dictionaries it gives each version's sessions.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.gateway_stack import gateway_stack
from tools.conformance import SUITES, Result, Runner, acceptor_sessions_file, session_level_files

pytestmark = pytest.mark.integration

CONFORMANCE = Path("conformance")
# Session-level definitions the exchange fails by design, per version, with why; each must still fail
# (a definition that starts passing is taken off this list). None today: every one passes.
NOT_APPLICABLE: dict[tuple[str, str], str] = {}


def _definitions() -> list[tuple[str, str]]:
    from tests.conftest import SHARED_REFERENCE

    out = []
    for suite in SUITES.values():
        folder = SHARED_REFERENCE / CONFORMANCE / suite.folder
        names = [p.stem for p in session_level_files(folder)] if folder.is_dir() else ["(suite absent)"]
        out += [(suite.version, name) for name in names]
    return out


@pytest.fixture(scope="module")
def runner(shared_reference: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    sessions = tmp_path_factory.mktemp("conformance") / "sessions.cfg"
    sessions.write_text("".join(acceptor_sessions_file(s.client, s.acceptor, s.begin_string)
                                for s in SUITES.values()))
    with gateway_stack(None, matcher=False, env={"FIXLAB_FIX_SESSIONS_FILE": str(sessions),
                                                    # QuickFIX's own sequences (6_SendTestRequest
                                                    # expects a disconnect, not our Logout).
                                                    "FIXLAB_SILENT_LOGOUT": "0"}) as stack:
        yield Runner("127.0.0.1", stack.fix_port, timeout_s=20)


@pytest.fixture(scope="module")
def played(runner: Runner, shared_reference: Path, request: pytest.FixtureRequest,
           ) -> Iterator[dict[tuple[str, str], Future[Result]]]:
    """Every selected definition, played as soon as the stack is up: the three versions side by side
    (each version has its own CompIDs, so its own session), one version's definitions one after
    another, in the order they are listed. Most of a definition's time is waiting on heartbeats
    (6_SendTestRequest waits ~35 s), so the three versions take about as long as the longest one.
    Each test below reads its own definition's result."""
    wanted: dict[str, list[str]] = {}
    for item in request.session.items:
        spec = getattr(item, "callspec", None)
        if item.module is request.module and item.originalname == "test_definition" and spec is not None:
            wanted.setdefault(spec.params["version"], []).append(spec.params["name"])
    futures: dict[tuple[str, str], Future[Result]] = {
        (v, n): Future() for v, names in wanted.items() for n in names}

    def play(version: str, names: list[str]) -> None:
        for name in names:
            future = futures[(version, name)]
            if not future.set_running_or_notify_cancel():
                return  # the run stopped early (-x): the rest stay unplayed
            path = shared_reference / CONFORMANCE / SUITES[version].folder / f"{name}.def"
            try:
                future.set_result(runner.run_file(path) if path.is_file() else Result(name, False, "absent"))
            except BaseException as exc:  # handed to the test that reads it
                future.set_exception(exc)

    with ThreadPoolExecutor(max_workers=max(1, len(wanted)), thread_name_prefix="conformance") as pool:
        for version, names in wanted.items():
            pool.submit(play, version, names)
        yield futures
        for future in futures.values():
            future.cancel()


@pytest.mark.parametrize("version", list(SUITES))
def test_each_suite_has_its_session_level_definitions(shared_reference: Path, version: str) -> None:
    suite = SUITES[version]
    folder = shared_reference / CONFORMANCE / suite.folder
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent (../shared is laid beside the repo in CI)")
    assert len(session_level_files(folder)) == suite.session_level


def test_the_not_applicable_list_names_definitions_that_exist(shared_reference: Path) -> None:
    for version, name in NOT_APPLICABLE:
        assert (shared_reference / CONFORMANCE / SUITES[version].folder / f"{name}.def").is_file(), name


@pytest.mark.parametrize(("version", "name"), _definitions())
def test_definition(played: dict[tuple[str, str], Future[Result]], shared_reference: Path,
                    version: str, name: str) -> None:
    path = shared_reference / CONFORMANCE / SUITES[version].folder / f"{name}.def"
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared is laid beside the repo in CI)")
    result = played[(version, name)].result(timeout=300)
    why = NOT_APPLICABLE.get((version, name))
    if why is None:
        assert result.passed, result.detail
    else:
        assert not result.passed, f"{version} {name} passes now: take it off NOT_APPLICABLE ({why})"
