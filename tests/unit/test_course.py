"""The FIX course (docs/course/): every lesson names its scenario, the one command that plays it, and
an excerpt written from a passing run; the excerpts' comparison masks only what changes per run."""

from __future__ import annotations

import re

from tools import course


def test_every_lesson_has_a_scenario_a_command_and_an_excerpt_of_a_passing_run() -> None:
    pages = sorted(p for p in course.COURSE.glob("*.md") if p.name != "index.md")
    assert len(pages) >= 10, pages
    by_page = {lesson.page: lesson for lesson in course.lessons()}
    assert set(by_page) == set(pages), "a lesson without a <!-- wire: NAME --> excerpt"
    for page in pages:
        lesson = by_page[page]
        text = page.read_text(encoding="utf-8")
        assert lesson.scenario_file.is_file(), (page.name, lesson.scenario)
        commands = course.COMMAND.findall(text)
        assert commands == [f"scenarios/{lesson.scenario}.scenario"], (page.name, commands)
        wire = lesson.wire_file.read_text(encoding="latin-1")
        assert f"# {lesson.scenario}.scenario: PASS, $run=" in wire, page.name
        assert course.comparable(wire), page.name


def test_comparable_masks_times_lengths_ids_and_the_run_but_nothing_else() -> None:
    one = ("# t\n# x.scenario: PASS, $run=abc1\n"
           "A > 8=FIX.4.4|9=120|35=D|34=2|52=20260101-10:00:00.000|11=abc1-b|44=101.00|10=201|\n"
           "A < 8=FIX.4.4|9=180|35=8|37=7|17=gw1-9|11=abc1-b|150=0|527=55|10=044|\n")
    two = (one.replace("abc1", "zz99").replace("9=120", "9=121").replace("10=201", "10=017")
           .replace("10:00:00", "11:12:13").replace("37=7", "37=8").replace("527=55", "527=56"))
    assert course.stale(one, two) == []
    assert course.comparable(one)[0] == "A > 8=FIX.4.4|9=*|35=D|34=2|52=*|11=$run-b|44=101.00|10=*|"
    changed = two.replace("44=101.00", "44=101.01")
    assert any("44=101.01" in line for line in course.stale(one, changed))
    assert course.stale(one, two.replace("150=0", "150=F"))
    assert course.stale(one, "\n".join(two.splitlines()[:-1]))  # a message fewer is stale too


def test_the_hook_puts_each_excerpt_on_its_page_as_a_code_block() -> None:
    lesson = course.lessons()[0]
    block = course.code_block(lesson.wire_file.read_text(encoding="latin-1"))
    assert block.startswith('<pre class="wire"><code>') and block.endswith("</code></pre>\n")
    assert "&lt; 8=FIX" in block  # the exchange's mark, escaped for HTML
    assert not re.search(r"^#", block, re.MULTILINE)
    assert "|10=" in block


def test_the_readme_and_the_site_show_the_screenshots_make_screenshots_takes() -> None:
    from tools import screenshots

    readme = (course.ROOT / "README.md").read_text(encoding="utf-8")
    index = (course.ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    makefile = (course.ROOT / "Makefile").read_text(encoding="utf-8")
    for name in (screenshots.PAGE_FILE, screenshots.TERMINAL_FILE):
        assert (course.ROOT / "docs" / "images" / name).is_file(), name
        assert f"(docs/images/{name})" in readme and f"(images/{name})" in index, name
    assert "python -m tools.screenshots --out docs/images" in makefile
    assert re.search(r"^test: .*\bscreenshots\b", makefile, re.MULTILINE)
