"""Talking to Claude while it works, in a real browser: a message sent while Claude streams,
a late answer to a question that timed out, and an answer whose turn ended unread."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from askuser.models import Question
from promptmgr.models import Run
from tests.engines.support import mcp_ask_user, sdk_question
from tests.helpers import QUOTE, HeldEnd, kill_the_cli, make_project, script
from tests.pages.chat import PROMPT, OpenChat, last_reply, send_prompt

pytestmark = [
    pytest.mark.browser,
    pytest.mark.xdist_group("browser"),
    pytest.mark.usefixtures("no_page_errors"),
]

# Claude, the policy agent and the app share 2 busy cores with the rest of the suite.
SLOW = 45_000

STREAMING = {"text": "z" * 400, "pace_ms": 15, "chunk_chars": 1}
ECHO = {"tool_use": {"name": "Bash", "input": {"command": "echo one", "description": "Say one"}}}
LATE = "Late answer to your question “Which database?” (it timed out and you went on without it): Postgres"


def test_a_message_sent_while_claude_streams_reaches_the_running_turn(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    project = make_project(owner=alice)
    open_chat(project)
    send_prompt(page, script({**STREAMING, **ECHO}, {"quote_user_messages": True}))

    expect(page.locator(".msg-claude").first).to_contain_text("zzzz", timeout=SLOW)
    expect(page.locator(PROMPT)).to_be_enabled()
    expect(page.locator(PROMPT)).to_have_attribute(
        "placeholder", "Claude is working — your message goes into the running turn"
    )
    send_prompt(page, "Also add a changelog entry.")

    bubble = page.locator(".msg-steer")
    expect(bubble.locator(".msg-text")).to_have_text("Also add a changelog entry.", timeout=SLOW)
    expect(bubble.locator(".msg-who")).to_have_text("You (while Claude works)", timeout=SLOW)
    expect(bubble.locator(".msg-delivery")).to_have_text("Reached Claude in the running turn", timeout=SLOW)
    expect(last_reply(page)).to_contain_text(
        'User messages received: ["Also add a changelog entry."]', timeout=SLOW
    )
    expect(page.locator("[data-role=status]")).to_have_text("Completed", timeout=SLOW)


def test_a_question_that_timed_out_takes_a_late_answer_which_reaches_claude(
    open_chat: OpenChat, page: Any, alice: Any, settings: Any
) -> None:
    settings.ASK_USER_LONG_POLL_SECONDS = 1
    project = make_project(owner=alice, ask_user_timeout=30)
    open_chat(project)
    first = mcp_ask_user(sdk_question("Which database?", "DB", ["SQLite", "Postgres"]))
    second = mcp_ask_user(sdk_question("Which port?", "Port", ["5432", "6543"]))
    send_prompt(page, script(first, second, {"quote_user_messages": True}))

    expired_card = page.locator(".qcard").first
    expect(expired_card.locator(".qcard-question")).to_have_text("Which database?", timeout=SLOW)
    Question.objects.filter(questions__0__question="Which database?").update(expires_at=timezone.now())
    expect(expired_card.locator(".qcard-closed")).to_contain_text("Question timed out", timeout=SLOW)
    expired_card.get_by_role("button", name="Answer anyway").click()
    expired_card.locator(".qcard-option", has_text="Postgres").click()
    expired_card.get_by_role("button", name="Send late answer").click()
    expect(expired_card.locator(".qcard-status")).to_have_text(
        "Late answer sent — waiting for Claude to read it…"
    )

    open_card = page.locator(".qcard").nth(1)
    open_card.locator(".qcard-option", has_text="5432").click()
    open_card.get_by_role("button", name="Send answer").click()

    expect(last_reply(page)).to_contain_text(f'User messages received: ["{LATE}"]', timeout=SLOW)
    expect(expired_card.locator(".qcard-status")).to_have_text(
        "Late answer: Reached Claude in the running turn"
    )
    expect(page.locator(".msg-steer .msg-who")).to_have_text("You (late answer)", timeout=SLOW)


def test_an_answer_whose_turn_died_unread_says_so_and_goes_on_as_the_next_prompt(
    open_chat: OpenChat, page: Any, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    end = HeldEnd(monkeypatch)
    project = make_project(owner=alice, ask_user_timeout=120)
    open_chat(project)
    send_prompt(page, script(mcp_ask_user(sdk_question("Which colour?", "Colour", ["Red", "Blue"])), QUOTE))
    card = page.locator(".qcard").first
    expect(card.locator(".qcard-question")).to_have_text("Which colour?", timeout=SLOW)

    kill_the_cli(Run.objects.latest("pk").pk)
    end.wait()
    card.locator(".qcard-option", has_text="Blue").click()
    card.get_by_role("button", name="Send answer").click()
    expect(card.locator(".qcard-status")).to_have_text("Answer sent, waiting for Claude…", timeout=SLOW)
    end.release.set()

    expect(card.locator(".qcard-status")).to_have_text(
        "Claude's turn ended before it read this answer. Sent as the conversation's next prompt.",
        timeout=SLOW,
    )
    # The page follows the run the answer started (the offline model asks on such a prompt).
    expect(page.locator(".qcard").nth(1).locator(".qcard-question")).to_have_text(
        "Which approach should I take for this demo task?", timeout=SLOW
    )
