"""The conversation sidebar says which conversations have Claude working or waiting for an answer."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from promptmgr.models import RunStatus
from tests.conftest import LiveServer
from tests.helpers import (
    ask,
    login_client,
    make_project,
    make_run,
    next_question,
    read_sse,
    script,
    start_run,
)
from tests.pages.chat import OpenChat, send_prompt

pytestmark = pytest.mark.browser

CHIPS = ".chat-conversation .status-chip"


def test_a_conversation_waiting_for_an_answer_is_marked_when_the_page_opens(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    make_run(owner=alice, project=project, status=RunStatus.COMPLETED, title="Finished work")
    make_run(owner=alice, project=project, status=RunStatus.WAITING_FOR_USER, title="Needs a decision")

    page = open_chat(project)

    expect(page.locator(".chat-conversation")).to_have_count(2)
    waiting = page.locator(".chat-conversation", has_text="Needs a decision")
    expect(waiting.locator(".status-chip")).to_have_text("Waiting for you")
    expect(waiting.locator(".status-chip")).to_have_class("status-chip is-waiting_for_user")
    expect(
        page.locator(".chat-conversation", has_text="Finished work").locator(".status-chip")
    ).to_have_count(0)


def test_the_open_conversations_chip_follows_its_run_live(open_chat: OpenChat, page: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    open_chat(project)

    send_prompt(page, script(ask("Which database?", ["SQLite", "PostgreSQL"]), {"text": "Done."}))

    expect(page.locator(".qcard")).to_be_visible()
    expect(page.locator(CHIPS)).to_have_text("Waiting for you")
    card = page.locator(".qcard")
    card.locator(".qcard-option", has_text="SQLite").click()
    card.get_by_role("button", name="Send answer").click()
    expect(page.locator("[data-role=status]")).to_have_text("Completed")
    expect(page.locator(CHIPS)).to_have_count(0)


def test_a_colleagues_question_in_another_conversation_shows_up_without_a_reload(
    open_chat: OpenChat, app_server: LiveServer, alice: Any, bob: Any
) -> None:
    project = make_project(owner=alice, members=(bob,))
    page = open_chat(project)
    expect(page.locator(".chat-sidebar-empty")).to_be_visible()

    colleague = login_client(app_server, "bob", "bob-password")
    started = start_run(colleague, project.pk, script(ask("Ship it?", ["Yes", "No"])))
    next_question(colleague, started["events_url"])

    # Nothing on alice's page changes by itself: only the sidebar's poll can bring it.
    expect(page.locator(CHIPS)).to_have_text("Waiting for you")

    assert colleague.post(f"/api/runs/{started['run_id']}/cancel").status_code == 202
    read_sse(colleague, started["events_url"])
    expect(page.locator(CHIPS)).to_have_count(0)
    expect(page.locator(".chat-conversation")).to_have_count(1)
