"""mkdocs hook (mkdocs.yml `hooks`): adds the reference pages generated from the code at build time."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `mkdocs` run as a script: the repo root

from tools.docs import commands, messages, settings


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "reference/settings.md", content=settings.markdown()))
    files.append(File.generated(config, "reference/commands.md", content=commands.markdown()))
    files.append(File.generated(config, "reference/messages.md", content=messages.markdown()))
    return files
