"""The page's resume command (issue 13, fault 5): what the schema accepts and refuses."""

from __future__ import annotations

import json

import pytest

from services.web.commands import CommandError, parse_command


def parse(obj: object) -> object:
    return parse_command(json.dumps(obj), 2048)


def test_resume_carries_the_session_its_token_and_the_last_record_shown() -> None:
    cmd = parse({"op": "resume", "lab_id": "0b38f94ac0d95e13", "token": "ab" * 16, "last_n": 42, "id": 1})
    assert (cmd.op, cmd.lab_id, cmd.token, cmd.last_n, cmd.id) == (  # type: ignore[attr-defined]
        "resume", "0b38f94ac0d95e13", "ab" * 16, 42, "1")
    assert parse({"op": "resume", "lab_id": "0b", "token": "cd"}).last_n == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("cmd", [
    {"op": "resume", "lab_id": "0b38f94ac0d95e13"},
    {"op": "resume", "token": "ab" * 16},
    {"op": "resume", "lab_id": "0B38F94AC0D95E13", "token": "ab"},
    {"op": "resume", "lab_id": "0b38\n", "token": "ab"},
    {"op": "resume", "lab_id": "0b", "token": "ab" * 33},
    {"op": "resume", "lab_id": "0b", "token": 7},
    {"op": "resume", "lab_id": "0b", "token": "ab", "last_n": True},
    {"op": "resume", "lab_id": "0b", "token": "ab", "last_n": -1},
    {"op": "resume", "lab_id": "0b", "token": "ab", "gateway_id": "gw1"},
])
def test_resume_refuses_anything_else(cmd: dict[str, object]) -> None:
    with pytest.raises(CommandError):
        parse(cmd)
