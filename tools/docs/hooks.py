"""mkdocs hook (mkdocs.yml `hooks`): adds the reference pages generated from the code at build time
and the benchmark plots drawn from the committed results (benchmark-plots.md),
and puts each course lesson's wire excerpt (docs/course/wire/NAME.wire) where its page says
``<!-- wire: NAME -->`` (tools/course.py writes the excerpts from a real run)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `mkdocs` run as a script: the repo root

from tools import course
from tools.docs import commands, messages, plots, settings


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "reference/settings.md", content=settings.markdown()))
    files.append(File.generated(config, "reference/commands.md", content=commands.markdown()))
    files.append(File.generated(config, "reference/messages.md", content=messages.markdown()))
    files.append(File.generated(config, "benchmark-plots.md", content=plots.markdown()))
    return files


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    def excerpt(m: Any) -> str:
        wire = course.WIRE / f"{m.group('name')}.wire"
        if not wire.is_file():  # strict builds fail on this: the page names an excerpt never written
            raise FileNotFoundError(f"{page.file.src_path}: no excerpt {wire.relative_to(course.ROOT)} "
                                    "(python -m tools.course writes it)")
        return course.code_block(wire.read_text(encoding="latin-1"))
    return course.MARKER.sub(excerpt, markdown)
