"""Accessibility: axe-core finds nothing serious on the projects, chat and settings pages;
only the run status and the cards are live regions; a new card takes the focus; the
whole question flow works from the keyboard."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from promptmgr.models import PermissionRule
from tests.helpers import browser_login, make_project, script
from tests.pages.chat import PROMPT, last_reply, send_prompt
from tests.pages.looks.helpers import serious_violations

pytestmark = pytest.mark.browser

REPLY = "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nprint('hi')\n```\n\nDone **well**."


def ask(question: str, labels: list[str]) -> dict[str, Any]:
    options = [{"label": label, "description": f"About {label}"} for label in labels]
    return {
        "tool_use": {"name": "mcp__ask-user__ask_user", "input": {"question": question, "options": options}}
    }


def test_axe_finds_nothing_serious_on_the_projects_settings_and_chat_pages(
    app_server: Any, page: Any, alice: Any, bob: Any
) -> None:
    project = make_project(owner=alice, members=(bob,), name="Alpha")
    PermissionRule.objects.create(project=project, rule="Bash(npm test:*)", added_by=alice)
    browser_login(page, app_server, "alice", "alice-password")
    assert serious_violations(page) == []

    page.goto(f"{app_server.url}/projects/{project.pk}/settings/")
    assert serious_violations(page) == []

    page.goto(f"{app_server.url}/projects/{project.pk}/")
    assert serious_violations(page) == []
    send_prompt(
        page,
        script(
            {"text": REPLY, "tool_use": {"name": "Read", "input": {"file_path": "/nonexistent"}}},
            ask("Which one?", ["First", "Second"]),
            {"text": "Thanks."},
        ),
    )
    expect(page.locator(".qcard.is-pending")).to_be_visible(timeout=30_000)
    page.locator("details.tool").first.locator("summary").click()
    assert serious_violations(page) == []


def test_only_the_status_and_the_cards_are_live_and_a_new_card_takes_the_focus(
    app_server: Any, page: Any, alice: Any
) -> None:
    project = make_project(owner=alice)
    browser_login(page, app_server, "alice", "alice-password")
    page.goto(f"{app_server.url}/projects/{project.pk}/")
    send_prompt(
        page, script({"text": "Before the question.", **ask("Ready?", ["Yes", "No"])}, {"text": "After."})
    )

    card = page.locator(".qcard.is-pending")
    expect(card).to_be_visible(timeout=30_000)
    expect(card.locator("input[type=radio]").first).to_be_focused()
    expect(card).to_have_attribute("aria-live", "polite")
    live = page.locator("[aria-live]:not([aria-live=off]), [role=status], [role=alert], [role=log]")
    # Each one is the header's status, a card, a part of a card, or a form error that is empty.
    owners = live.evaluate_all(
        """(nodes) => nodes.map((n) => {
            if (n.closest(".chat-status")) return "status";
            if (n.closest(".qcard, .pcard")) return "card";
            if (n.matches(".composer-error") && n.hidden) return "hidden form error";
            return n.outerHTML.slice(0, 80);
        })"""
    )
    assert set(owners) <= {"status", "card", "hidden form error"}, owners
    assert "status" in owners and "card" in owners
    expect(page.locator(".chat-stream")).not_to_have_attribute("aria-live", "polite")
    expect(page.locator(".chat-conversations")).not_to_have_attribute("aria-live", "polite")
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    expect(last_reply(page)).to_have_text("After.", timeout=30_000)


def test_a_question_is_asked_answered_and_settings_reached_by_keyboard_alone(
    app_server: Any, page: Any, alice: Any, look: str
) -> None:
    project = make_project(owner=alice, name="Keys")
    browser_login(page, app_server, "alice", "alice-password")
    page.goto(f"{app_server.url}/projects/{project.pk}/")
    expect(page.locator(PROMPT)).to_be_focused()

    page.keyboard.type(script(ask("Which way?", ["Left", "Right"]), {"quote_tool_results": True}))
    page.keyboard.press("Enter")
    card = page.locator(".qcard.is-pending")
    expect(card).to_be_visible(timeout=30_000)
    page.keyboard.press("ArrowDown")  # radio group: the arrow moves the choice to "Right"
    page.keyboard.press("Tab")
    expect(card.get_by_label("Other answer")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")
    expect(last_reply(page)).to_contain_text("User selected: Right", timeout=30_000)

    # The tool call opens with Enter; the theme toggles with Space; Settings opens with Enter.
    summary = page.locator("details.tool summary").first
    summary.focus()
    page.keyboard.press("Enter")
    expect(page.locator("details.tool").first).to_have_attribute("open", "")
    toggle = page.get_by_role("button", name="Dark mode")
    before = toggle.get_attribute("aria-pressed")
    toggle.focus()
    page.keyboard.press("Space")
    expect(toggle).not_to_have_attribute("aria-pressed", before or "")
    page.get_by_role("link", name="Settings").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Settings of Keys")).to_be_visible()
    page.get_by_label("Question timeout (seconds)").focus()
    page.keyboard.press("Control+A")
    page.keyboard.type("90")
    page.keyboard.press("Enter")  # submits the form
    expect(page.locator(".message-success")).to_have_text("Settings saved.")
    project.refresh_from_db()
    assert project.ask_user_timeout == 90
