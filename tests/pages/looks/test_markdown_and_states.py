"""Markdown as it streams (tables, highlighted code, long replies folded) and the clear
states: working, cancelled, an unanswered question, an "Other" answer, a note's Enter."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.helpers import browser_login, make_project, script
from tests.pages.chat import PROMPT, last_reply, send_prompt
from tests.pages.looks.conftest import CROSSED
from tests.pages.looks.helpers import contrast

pytestmark = pytest.mark.browser

TABLE_AND_CODE = (
    "| Step | What |\n|---|---|\n| 1 | Add `retry()` |\n| 2 | Test it |\n\n"
    "```python\ndef retry(call):\n    return call()\n```\n\n" + "More words follow here. " * 40
)
DANGER = "rgb(201, 42, 42)"
FOLDED = re.compile(r"\bis-folded\b")


def open_chat(page: Any, server: Any, project: Any) -> None:
    browser_login(page, server, "alice", "alice-password")
    page.goto(f"{server.url}/projects/{project.pk}/")


def ask(question: str, labels: list[str]) -> dict[str, Any]:
    options = [{"label": label} for label in labels]
    return {
        "tool_use": {"name": "mcp__ask-user__ask_user", "input": {"question": question, "options": options}}
    }


def test_a_table_and_highlighted_code_show_while_the_reply_still_streams(
    app_server: Any, page: Any, alice: Any
) -> None:
    project = make_project(owner=alice)
    open_chat(page, app_server, project)

    send_prompt(page, script({"text": TABLE_AND_CODE, "pace_ms": 40, "chunk_chars": 6}))

    live = page.locator(".msg-text.is-streaming.markdown-live")
    expect(live.locator("table tbody tr")).to_have_count(2, timeout=30_000)
    expect(live.locator("code .hl-k").first).to_have_text("def")
    expect(page.locator(".msg-text.is-streaming")).to_have_count(1)  # still streaming
    reply = last_reply(page)
    expect(reply.locator("table th").first).to_have_text("Step", timeout=30_000)
    keyword = reply.locator("code .hl-k").first
    plain = reply.locator("code .hl-n").first
    assert keyword.evaluate("e => getComputedStyle(e).color") != plain.evaluate(
        "e => getComputedStyle(e).color"
    )
    assert contrast(keyword) >= 4.5
    expect(page.locator(".msg-text.is-streaming")).to_have_count(0)


def test_a_long_reply_folds_behind_show_more(app_server: Any, page: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    open_chat(page, app_server, project)

    send_prompt(page, script({"text": "Paragraph of output.\n\n", "repeat": 80}))

    reply = last_reply(page)
    expect(reply).to_have_class(FOLDED, timeout=30_000)
    assert reply.evaluate("e => e.getBoundingClientRect().height") <= 490
    more = page.get_by_role("button", name="Show more")
    expect(more).to_have_attribute("aria-expanded", "false")
    more.click()
    expect(reply).not_to_have_class(FOLDED)
    expect(page.get_by_role("button", name="Show less")).to_have_attribute("aria-expanded", "true")
    assert reply.evaluate("e => e.getBoundingClientRect().height") > 1000


def test_working_shows_from_the_prompt_to_the_first_words(app_server: Any, page: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    open_chat(page, app_server, project)

    send_prompt(page, script({"text": "Here I am."}))

    working = page.locator(".run-working")
    expect(working).to_be_visible()
    expect(working).to_have_text("Claude is working…")
    expect(last_reply(page)).to_have_text("Here I am.", timeout=30_000)
    expect(working).to_be_hidden()


def test_a_cancel_reads_as_a_neutral_cancelled_and_the_cursor_goes(
    app_server: Any, page: Any, alice: Any
) -> None:
    project = make_project(owner=alice)
    open_chat(page, app_server, project)
    send_prompt(page, script({"text": "z" * 400, "pace_ms": 50, "chunk_chars": 2}))
    expect(page.locator(".msg-text.is-streaming")).to_be_visible(timeout=30_000)

    page.get_by_role("button", name="Cancel").click()

    status = page.locator("[data-role=status]")
    expect(status).to_have_text("Cancelled")
    expect(page.locator(".msg-notice")).to_have_text("Cancelled by the user.")
    expect(page.locator(".msg-error")).to_have_count(0)
    expect(page.locator(".msg-text.is-streaming")).to_have_count(0)
    for chip in [status, page.locator(".run-footer .status-chip")]:
        assert chip.evaluate("e => getComputedStyle(e).color") != DANGER
        assert contrast(chip) >= 4.5
    expect(page.locator(".run-working")).to_be_hidden()


def test_a_valid_other_answer_clears_the_error_and_enter_in_a_note_is_a_new_line(
    app_server: Any, page: Any, alice: Any
) -> None:
    project = make_project(owner=alice)
    open_chat(page, app_server, project)
    send_prompt(page, script(ask("Which database?", ["SQLite", "PostgreSQL"]), {"quote_tool_results": True}))
    card = page.locator(".qcard")
    expect(card).to_be_visible(timeout=30_000)

    card.get_by_role("button", name="Send answer").click()
    error = card.locator(".qcard-error")
    expect(error).to_have_text("Choose an option or type an answer first.")
    card.get_by_label("Other answer").fill("DuckDB")
    expect(error).to_be_hidden()

    card.locator(".qcard-notes-box summary").click()
    note = card.get_by_label("Note for Claude (Enter: new line, Ctrl+Enter sends)")
    note.press_sequentially("first line")
    note.press("Enter")
    note.press_sequentially("second line")
    expect(note).to_have_value("first line\nsecond line")
    expect(card.locator(".qcard-form")).to_be_visible()  # Enter did not send
    note.press("Control+Enter")

    expect(last_reply(page)).to_contain_text("User answered: DuckDB", timeout=30_000)
    expect(last_reply(page)).to_contain_text("first line\\nsecond line")


@pytest.mark.parametrize("look", CROSSED)
def test_an_unanswered_question_ends_with_a_neutral_chip(app_server: Any, page: Any, alice: Any) -> None:
    project = make_project(owner=alice, ask_user_timeout=30)
    open_chat(page, app_server, project)

    send_prompt(page, script(ask("Anyone there?", ["Yes"]), {"text": "Went on alone."}))

    expect(page.locator(".qcard-closed strong")).to_have_text("Question timed out", timeout=60_000)
    state = page.locator("details.tool .tool-state")
    expect(state).to_have_text("no answer", timeout=30_000)
    assert state.evaluate("e => getComputedStyle(e).color") != DANGER
    assert contrast(state) >= 4.5
    expect(page.locator("details.tool.is-error")).to_have_count(0)
    expect(page.locator(PROMPT)).to_be_enabled(timeout=30_000)
