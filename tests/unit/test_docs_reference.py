"""The settings reference lists every environment variable the code reads (tools/docs/settings.py).

The reference is read from the code with ``ast``; this test scans the same source a second, blunter
way (every quoted ``FIXLAB_*`` / ``REDIS_URL`` and every ``ENV_PREFIX + "..."``) and fails when a name
the code mentions is missing from the reference, so a setting read in a new way cannot go unlisted.
"""

from __future__ import annotations

import re
from pathlib import Path

from services.cli import SUBCOMMANDS
from tools.docs import commands, messages, settings

ROOT = Path(__file__).resolve().parents[2]
QUOTED = re.compile(r"[\"'](FIXLAB_[A-Z0-9_]*[A-Z0-9]|REDIS_URL)[\"']")
PREFIXED = re.compile(r"ENV_PREFIX\s*\+\s*[\"']([A-Z0-9_]+)[\"']")


def _mentioned() -> set[str]:
    names: set[str] = set()
    for package in settings.PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            names |= set(QUOTED.findall(text))
            names |= {"FIXLAB_" + n for n in PREFIXED.findall(text)}
    return names


def test_every_variable_the_code_mentions_is_in_the_reference() -> None:
    listed = {s.name for s in settings.settings()}
    assert not _mentioned() - listed, sorted(_mentioned() - listed)


def test_reference_names_helpers_defaults_and_bounds() -> None:
    by_name = {s.name: s for s in settings.settings()}
    assert by_name["FIXLAB_FIX_PORT"].kind == "whole number"
    assert by_name["FIXLAB_FIX_PORT"].default == "9878"
    assert "lo 1" in by_name["FIXLAB_FIX_PORT"].bounds
    assert "REDIS_URL" in by_name
    assert "FIXLAB_INSTRUMENTS" in by_name  # read through a local name: name = ENV_PREFIX + "..."


def test_reference_page_has_a_row_per_setting() -> None:
    page = settings.markdown()
    for s in settings.settings():
        assert f"| `{s.name}` |" in page


def test_commands_reference_has_every_subcommand_and_its_options() -> None:
    page = commands.markdown()
    for name in SUBCOMMANDS:
        assert f"## fixlab {name}" in page
        assert f"usage: fixlab {name}" in page
    assert "--fix-version" in page  # fixlab client's parser, as argparse prints it


def test_messages_reference_lists_every_exchange_message_per_version() -> None:
    from shared.fix.dictionary import EXCHANGE_MESSAGES, load_version
    from shared.fix.versions import VERSIONS

    page = messages.markdown()
    for name in VERSIONS:
        section = page.split(f"## FIX {name} ")[1].split("\n## FIX ")[0]
        d = load_version(name)
        for msg_type in EXCHANGE_MESSAGES & d.messages.keys():
            assert f"| `{msg_type}` | {d.messages[msg_type].name} |" in section, (name, msg_type)
    assert "ClOrdID (11)" in page


def test_every_setting_has_a_meaning_and_every_meaning_a_setting() -> None:
    from tools.docs.meanings import MEANINGS

    read = {s.name for s in settings.settings()}
    assert not read - set(MEANINGS), f"add to tools/docs/meanings.py: {sorted(read - set(MEANINGS))}"
    assert not set(MEANINGS) - read, f"nobody reads these any more: {sorted(set(MEANINGS) - read)}"
    assert all(m.strip() for m in MEANINGS.values())
    page = settings.markdown()
    assert "| Variable | Meaning |" in page
    assert f"| `FIXLAB_TICK` | {MEANINGS['FIXLAB_TICK']} |" in page
