"""The offline demo teaches itself: the welcome lists its trigger words, each one shows
its part of the app for real (a question, a multi-question form, an approval, a file
edit with its diff), and with ask-user off the list and the model say what is off."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from promptmgr.scripted_model.scenarios import DEMO_COMMAND, DEMO_TRIGGERS
from tests.helpers import browser_login, make_project
from tests.pages.chat import PROMPT, last_reply
from tests.pages.looks.conftest import CROSSED

pytestmark = pytest.mark.browser


@pytest.fixture
def demo(settings: Any) -> None:
    """The pages as a fresh install without a key shows them (the scripted model answers either way)."""
    settings.DEMO_MODEL = True


def open_chat(page: Any, server: Any, project: Any) -> None:
    browser_login(page, server, "alice", "alice-password")
    page.goto(f"{server.url}/projects/{project.pk}/")


def try_trigger(page: Any, word: str) -> None:
    page.get_by_role("button", name=word, exact=True).click()
    expect(page.locator(PROMPT)).to_be_focused()
    page.keyboard.press("Enter")


def test_the_welcome_lists_every_trigger_and_a_click_fills_the_prompt(
    app_server: Any, page: Any, alice: Any, demo: None
) -> None:
    project = make_project(owner=alice)
    open_chat(page, app_server, project)

    triggers = page.locator("[data-role=demo-triggers] li")
    expect(triggers).to_have_count(4)
    for item, trigger in zip(triggers.all(), DEMO_TRIGGERS, strict=True):
        expect(item).to_contain_text(trigger.what)
    page.get_by_role("button", name="form", exact=True).click()
    expect(page.locator(PROMPT)).to_have_value("Show me a form with two questions.")


@pytest.mark.parametrize("look", CROSSED)
def test_each_trigger_shows_its_part_of_the_app(app_server: Any, page: Any, alice: Any, demo: None) -> None:
    project = make_project(owner=alice)
    open_chat(page, app_server, project)

    try_trigger(page, "ask")
    card = page.locator(".qcard.is-pending")
    expect(card).to_be_visible(timeout=30_000)
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    expect(last_reply(page)).to_contain_text("The answer reached me", timeout=30_000)
    expect(page.locator(PROMPT)).to_be_enabled(timeout=30_000)

    page.get_by_role("button", name="+ New conversation").click()
    try_trigger(page, "form")
    form = page.locator(".qcard.is-pending")
    expect(form.locator("fieldset")).to_have_count(2, timeout=30_000)
    page.keyboard.press("1")
    page.keyboard.press("3")
    form.get_by_role("button", name="Send answer").click()
    expect(last_reply(page)).to_contain_text("The answer reached me", timeout=30_000)
    expect(page.locator(PROMPT)).to_be_enabled(timeout=30_000)

    page.get_by_role("button", name="+ New conversation").click()
    try_trigger(page, "run")
    approval = page.locator(".pcard.is-pending")
    expect(approval.locator(".pcard-command")).to_have_text(DEMO_COMMAND, timeout=30_000)
    approval.get_by_role("button", name="Allow once").click()
    expect(last_reply(page)).to_contain_text("approved: 6 x 7 = 42", timeout=30_000)
    expect(page.locator(PROMPT)).to_be_enabled(timeout=30_000)

    page.get_by_role("button", name="+ New conversation").click()
    try_trigger(page, "edit")
    expect(last_reply(page)).to_have_text("Done: the file was written, then edited.", timeout=30_000)
    edit = page.locator("details.tool", has=page.locator(".tool-name", has_text="Edit"))
    expect(edit.locator(".tool-state")).to_have_text("done")
    edit.locator("summary").click()
    expect(edit.locator(".diff-line.is-del")).to_have_text("- A first draft.")
    expect(edit.locator(".diff-line.is-add")).to_have_text("+ A second, better draft.")


@pytest.mark.parametrize("look", CROSSED)
def test_with_questions_off_the_welcome_and_the_model_say_so(
    app_server: Any, page: Any, alice: Any, demo: None
) -> None:
    project = make_project(owner=alice, ask_user_enabled=False)
    open_chat(page, app_server, project)

    items = page.locator("[data-role=demo-triggers] li")
    off = [t.word for t in DEMO_TRIGGERS if t.needs_ask_user]
    assert off == ["ask", "form", "run"]
    for item, trigger in zip(items.all(), DEMO_TRIGGERS, strict=True):
        if trigger.needs_ask_user:
            expect(item).to_contain_text("off: questions and approvals are off for this project")
            expect(item.get_by_role("button")).to_have_count(0)
    expect(page.get_by_role("button", name="edit", exact=True)).to_be_visible()

    page.locator(PROMPT).fill("Please ask me which approach to take.")
    page.keyboard.press("Enter")
    expect(last_reply(page)).to_contain_text(
        "Questions and approvals are off for this project", timeout=30_000
    )
    expect(page.locator(".qcard")).to_have_count(0)
