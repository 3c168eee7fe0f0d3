"""The answering policy on the chat page: its answer, its decision and its reasoning on the cards."""

from __future__ import annotations

import json
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


TOLD = "Build it through the Makefile, not by hand."
DENIED_REASONING = "The instructions send Bash builds through the Makefile."
DENYING = json.dumps({"decision": "deny", "choices": [], "message": TOLD, "reasoning": DENIED_REASONING})


def test_a_tool_call_the_policy_denies_says_so_once_with_its_reasoning_and_what_claude_was_told(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    project = make_project(
        owner=alice,
        permission_mode="default",
        answer_policy="auto",
        answer_policy_delay=0,
        answer_policy_permissions=True,
        # The scripted model replies as POLICY_SCRIPT says; mentioning Bash lets the policy decide it.
        answer_policy_instructions=f"Bash builds go through the Makefile. POLICY_SCRIPT: {DENYING}",
    )
    open_chat(project)
    bash = {"tool_use": {"name": "Bash", "input": {"command": "mkdir -p build", "description": "Make it"}}}
    send_prompt(page, script(bash, QUOTE))

    expect(last_reply(page)).to_contain_text(TOLD, timeout=SLOW)
    expect_denied_by_policy(page)

    page.reload()  # replayed from the history the database kept
    expect_denied_by_policy(page)


def expect_denied_by_policy(page: Any) -> None:
    """The run completed, and its card says the policy denied the call, once."""
    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed", timeout=SLOW)
    card = page.locator(".pcard")
    expect(card.locator(".pcard-outcome")).to_have_text("Denied by policy", timeout=SLOW)
    note = card.locator(".policy-note.is-answered")
    expect(note.locator(".policy-reasoning")).to_have_text(DENIED_REASONING)
    told = f"The team's policy denied this Bash call: {TOLD}"
    expect(note.locator(".policy-told")).to_have_text(f"Claude was told: {told}")
    # The card names the policy's decision once (it read "Denied by policy: The team's
    # policy denied …" above a note headed "Denied by policy" before).
    assert card.inner_text().count("by policy") == 1
