"""The answering policy on the chat page: its answer and reasoning on the question card."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.helpers import QUOTE, ask, make_project, script
from tests.pages.chat import HOLD_EVENTS_AFTER_ANSWER, OpenChat, last_reply, release_events, send_prompt

pytestmark = [
    pytest.mark.browser,
    pytest.mark.xdist_group("browser"),
    pytest.mark.usefixtures("no_page_errors"),
]

# Claude, the policy agent and the app share 2 busy cores with the rest of the suite.
SLOW = 45_000

REASONING = "I answered as the team would: the instructions name “Postgres”."


def test_the_policys_answer_shows_on_the_card_with_its_reasoning_and_reaches_claude(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    page.add_init_script(HOLD_EVENTS_AFTER_ANSWER)
    project = make_project(
        owner=alice,
        answer_policy="auto",
        answer_policy_delay=0,
        answer_policy_instructions="We always use Postgres for databases.",
    )
    open_chat(project)

    send_prompt(page, script(ask("Which database?", ["SQLite", "Postgres"]), QUOTE))

    card = page.locator(".qcard")
    answered = card.locator(".policy-note.is-answered")
    expect(answered.locator(".policy-heading")).to_have_text("Answered by policy: Postgres", timeout=SLOW)
    expect(answered.locator(".policy-reasoning")).to_have_text(REASONING, timeout=SLOW)
    # Until Claude takes the answer, any member may replace it.
    expect(answered.locator(".policy-override-note")).to_contain_text(
        "Any member can override this answer until Claude takes it."
    )
    expect(answered.get_by_role("button", name="Override")).to_be_visible(timeout=SLOW)
    release_events(page)

    expect(last_reply(page)).to_contain_text("User selected: Postgres", timeout=SLOW)
    expect(card.locator(".qcard-status")).to_have_text("Delivered to Claude ✓", timeout=SLOW)
    expect(answered.locator(".policy-reasoning")).to_have_text(REASONING, timeout=SLOW)
    expect(answered.locator(".policy-override-note")).to_have_count(0, timeout=SLOW)


def test_a_suggestion_shows_on_the_card_and_the_persons_choice_is_sent(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    project = make_project(
        owner=alice,
        answer_policy="suggest",
        answer_policy_instructions="We always use Postgres for databases.",
    )
    open_chat(project)
    send_prompt(page, script(ask("Which database?", ["SQLite", "Postgres"]), QUOTE))

    card = page.locator(".qcard")
    note = card.locator(".policy-note")
    expect(note.locator(".policy-heading")).to_have_text("The policy suggests: Postgres", timeout=SLOW)
    expect(note.locator(".policy-reasoning")).to_have_text(REASONING, timeout=SLOW)
    card.locator(".qcard-option", has_text="SQLite").click()
    card.get_by_role("button", name="Send answer").click()

    expect(last_reply(page)).to_contain_text("User selected: SQLite", timeout=SLOW)
    expect(card.locator(".qcard-answer")).to_have_text("You answered: SQLite", timeout=SLOW)


def test_a_suggestion_accepted_on_the_card_is_sent_as_the_persons_answer(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    project = make_project(
        owner=alice,
        answer_policy="suggest",
        answer_policy_instructions="We always use Postgres for databases.",
    )
    open_chat(project)
    send_prompt(page, script(ask("Which database?", ["SQLite", "Postgres"]), QUOTE))

    card = page.locator(".qcard")
    card.get_by_role("button", name="Use this answer").click(timeout=SLOW)

    expect(last_reply(page)).to_contain_text("User selected: Postgres", timeout=SLOW)
    expect(card.locator(".qcard-answer")).to_have_text("You answered: Postgres")
