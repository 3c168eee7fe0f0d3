"""Question cards in a real browser, answered back into the still-running Claude turn."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import expect

from askuser.answers import MSG_TOO_LONG
from core.questions import MAX_TEXT
from tests.conftest import LiveServer
from tests.helpers import QUOTE, ask, browser_login, login_client, make_project, script
from tests.pages.chat import (
    HOLD_EVENTS_AFTER_ANSWER,
    PROMPT,
    OpenChat,
    last_reply,
    release_events,
    send_prompt,
    wait_until_claude_went_on,
    wait_until_the_run_ended,
)

pytestmark = pytest.mark.browser

WAITING_TITLE = re.compile(r"^\(\?\) Claude is waiting — ")
XSS = "<img src=x onerror=alert(1)>"
ANSWER_SENT = "Answer sent, waiting for Claude…"
DELIVERED = "Delivered to Claude ✓"
ENABLED_INPUTS = "input:enabled, textarea:enabled, button:enabled"


def watch_clicks(page: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """What the page sends over its click channel (each frame's message) and the answers it
    posts to the endpoint (their URLs); installed before the page opens its channel."""
    frames: list[dict[str, Any]] = []
    posts: list[str] = []

    def socket_opened(socket: Any) -> None:
        if socket.url.endswith("/api/askuser/clicks"):
            socket.on("framesent", lambda payload: frames.append(json.loads(payload)))

    page.on("websocket", socket_opened)
    page.on("request", lambda request: posts.append(request.url) if "submit-answer" in request.url else None)
    return frames, posts


def test_an_option_picked_on_the_card_reaches_claude(open_chat: OpenChat, page: Any, alice: Any) -> None:
    page.add_init_script(HOLD_EVENTS_AFTER_ANSWER)
    frames, posts = watch_clicks(page)
    project = make_project(owner=alice)
    open_chat(project)

    send_prompt(page, script(ask("Which database?", ["SQLite", "PostgreSQL"], header="DB"), QUOTE))

    card = page.locator(".qcard")
    expect(card.locator(".qcard-question")).to_have_text("Which database?")
    expect(card.locator(".qcard-chip")).to_have_text("DB")
    expect(card.locator(".qcard-desc")).to_have_text(["about SQLite", "about PostgreSQL"])
    expect(card.locator("input[type=radio]")).to_have_count(3)  # two options and "Other"
    expect(card.locator(".qcard-other-text")).to_be_visible()
    expect(card.locator(".qcard-countdown")).to_have_text(re.compile(r"^\d+:\d\d left$"))
    expect(page.locator("[data-role=status]")).to_have_text("Waiting for you")
    expect(page).to_have_title(WAITING_TITLE)

    card.locator(".qcard-option", has_text="PostgreSQL").click()
    card.get_by_role("button", name="Send answer").click()

    # Answered: the card is read-only and waits for Claude, even once Claude has gone on,
    # until this page hears of it.
    expect(card.locator(".qcard-status")).to_have_text(ANSWER_SENT)
    expect(card.locator(".qcard-status .spinner")).to_have_count(1)
    expect(card.locator(".qcard-sent")).to_have_text("Answered by you: PostgreSQL")
    expect(card.locator(".qcard-form")).to_be_visible()
    expect(card.locator("input[type=radio]:checked")).to_have_count(1)
    expect(card.get_by_role("button", name="Send answer")).to_be_disabled()
    expect(card.locator(ENABLED_INPUTS)).to_have_count(0)
    expect(card.locator(".qcard-answer")).to_have_count(0)
    expect(page).not_to_have_title(WAITING_TITLE)
    wait_until_claude_went_on(page)
    expect(card.locator(".qcard-status")).to_have_text(ANSWER_SENT)
    expect(card.locator(".qcard-answer")).to_have_count(0)
    release_events(page)

    expect(last_reply(page)).to_contain_text("User selected: PostgreSQL")
    expect(card.locator(".qcard-answer")).to_have_text("You answered: PostgreSQL")
    expect(card.locator(".qcard-sent")).to_have_count(0)
    expect(card.locator(".qcard-form")).to_be_hidden()
    expect(card.locator(".qcard-status")).to_have_text(DELIVERED)
    expect(page).not_to_have_title(WAITING_TITLE)
    expect(page.locator("[data-role=status]")).to_have_text("Completed")
    # The answer left over the click channel, not through the endpoint.
    assert [(frame["kind"], frame["body"]["selectedOptions"]) for frame in frames] == [("answer", [1])]
    assert posts == []


def test_without_the_click_channel_the_answer_is_posted_and_reaches_claude(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    # The channel's socket is closed as it opens (a proxy that drops WebSockets, say).
    page.route_web_socket("**/api/askuser/clicks", lambda socket: socket.close())
    frames, posts = watch_clicks(page)
    project = make_project(owner=alice)
    open_chat(project)

    send_prompt(page, script(ask("Which database?", ["SQLite", "PostgreSQL"]), QUOTE))
    card = page.locator(".qcard")
    card.locator(".qcard-option", has_text="SQLite").click()
    card.get_by_role("button", name="Send answer").click()

    expect(last_reply(page)).to_contain_text("User selected: SQLite")
    expect(card.locator(".qcard-answer")).to_have_text("You answered: SQLite")
    assert frames == []
    assert len(posts) == 1


def test_a_free_text_answer_reaches_claude(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)

    send_prompt(page, script(ask("What should the module be called?"), QUOTE))

    card = page.locator(".qcard")
    answer = card.locator("textarea.qcard-free")
    expect(answer).to_be_focused()
    expect(card.locator("input[type=radio], input[type=checkbox]")).to_have_count(0)
    answer.type("billing")
    answer.press("Shift+Enter")
    expect(answer).to_have_value("billing\n")
    answer.fill("billing_core")
    answer.press("Enter")

    expect(last_reply(page)).to_contain_text("User answered: billing_core")
    expect(card.locator(".qcard-answer")).to_have_text("You answered: billing_core")


def test_an_answer_too_long_for_the_click_channel_is_posted_and_the_servers_sentence_shown(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    frames, posts = watch_clicks(page)
    project = make_project(owner=alice)
    open_chat(project)
    send_prompt(page, script(ask("Paste the whole log?"), QUOTE))

    card = page.locator(".qcard")
    answer = card.locator("textarea.qcard-free")
    long_answer = "log " + "x" * 1_080_000  # above the channel's million characters
    # Set as a paste would (typing a million characters would take minutes).
    answer.evaluate(
        "(box, text) => { box.value = text; box.dispatchEvent(new Event('input', {bubbles: true})); }",
        long_answer,
    )
    with page.expect_response("**/api/askuser/submit-answer") as posted:
        answer.press("Enter")

    # The server's own sentence on the card (answers are limited to MAX_TEXT characters),
    # where a message that large would have ended the socket without one.
    assert posted.value.status == 422
    expect(card.locator(".qcard-error")).to_contain_text(MSG_TOO_LONG.format(limit=MAX_TEXT))
    expect(card.locator(".qcard-free")).to_be_enabled()
    assert frames == []
    assert len(posts) == 1


def test_keyboard_picks_several_options_and_notes_go_along(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)

    send_prompt(page, script(ask("Which checks?", ["Lint", "Types", "Tests"], multi=True), QUOTE))

    card = page.locator(".qcard")
    expect(card.locator("input[type=checkbox]")).to_have_count(4)
    page.keyboard.press("1")
    page.keyboard.press("3")
    expect(card.locator("input[type=checkbox]:checked")).to_have_count(2)
    card.locator(".qcard-notes-box summary").click()
    card.locator(".qcard-notes").fill("tests first")
    # Enter is a new line in a note (issue 21); Ctrl+Enter sends from it.
    card.locator(".qcard-notes").press("Control+Enter")

    expect(last_reply(page)).to_contain_text("User selected: Lint, Tests")
    expect(last_reply(page)).to_contain_text("Notes: tests first")
    expect(card.locator(".qcard-answer")).to_have_text("You answered: Lint, Tests")
    expect(card.locator(".qcard-answer-notes")).to_have_text("Note: tests first")


def test_an_other_answer_replaces_the_options(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)

    send_prompt(page, script(ask("Which database?", ["SQLite", "PostgreSQL"]), QUOTE))

    card = page.locator(".qcard")
    page.keyboard.press("1")
    card.locator(".qcard-other-text").fill("DuckDB")
    expect(card.locator("input[value=other]")).to_be_checked()
    card.locator(".qcard-other-text").press("Enter")

    expect(last_reply(page)).to_contain_text("User answered: DuckDB")
    expect(card.locator(".qcard-answer")).to_have_text("You answered: DuckDB")


def test_sending_nothing_says_what_is_missing(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    send_prompt(page, script(ask("Which database?", ["SQLite", "PostgreSQL"]), QUOTE))
    card = page.locator(".qcard")

    card.get_by_role("button", name="Send answer").click()

    expect(card.locator(".qcard-error")).to_have_text("Choose an option or type an answer first.")
    expect(card.locator(".qcard-q.is-missing")).to_have_count(1)
    page.keyboard.press("2")
    expect(card.locator(".qcard-q.is-missing")).to_have_count(0)
    page.keyboard.press("Enter")
    expect(card.locator(".qcard-answer")).to_have_text("You answered: PostgreSQL")


def test_a_two_question_form_is_answered_at_once(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk")
    page = open_chat(project)
    questions = [
        {
            "question": "Which database?",
            "header": "DB",
            "options": [
                {"label": "SQLite", "description": "one file"},
                {"label": "PostgreSQL", "description": "a server"},
            ],
            "multiSelect": False,
        },
        {
            "question": "Which checks?",
            "header": "CI",
            "options": [
                {"label": "Lint", "description": "ruff"},
                {"label": "Types", "description": "mypy"},
                {"label": "Tests", "description": "pytest"},
            ],
            "multiSelect": True,
        },
    ]

    send_prompt(
        page, script({"tool_use": {"name": "AskUserQuestion", "input": {"questions": questions}}}, QUOTE)
    )

    card = page.locator(".qcard")
    expect(card.locator(".qcard-q")).to_have_count(2)
    expect(card.locator(".qcard-chip")).to_have_text(["DB", "CI"])
    expect(card.locator(".qcard-badge")).to_have_text("Claude has 2 questions")
    # Number keys go to the first unanswered question, then on to the next.
    page.keyboard.press("2")
    page.keyboard.press("1")
    page.keyboard.press("3")
    expect(card.locator(".qcard-q").nth(0).locator("input:checked")).to_have_count(1)
    expect(card.locator(".qcard-q").nth(1).locator("input:checked")).to_have_count(2)
    card.get_by_role("button", name="Send answer").click()

    reply = last_reply(page)
    expect(reply).to_contain_text("PostgreSQL")
    expect(reply).to_contain_text("Lint, Tests")
    expect(card.locator(".qcard-answer-list li")).to_have_text(
        ["Which database? PostgreSQL", "Which checks? Lint, Tests"]
    )


def test_question_text_is_shown_literally_never_as_html(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    dialogs: list[str] = []

    def record(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", record)
    step = ask(f"Pick {XSS}", ["<b>bold</b>", "plain"], header="<i>h</i>")
    step["tool_use"]["input"]["options"][0]["description"] = XSS

    send_prompt(page, script(step, QUOTE))

    card = page.locator(".qcard")
    expect(card.locator(".qcard-question")).to_have_text(f"Pick {XSS}")
    expect(card.locator(".qcard-label").first).to_have_text("<b>bold</b>")
    expect(card.locator(".qcard-desc").first).to_have_text(XSS)
    expect(card.locator(".qcard-chip")).to_have_text("<i>h</i>")
    expect(card.locator("img, b, i")).to_have_count(0)
    expect(page.locator(".tool-summary")).to_have_text(f"Pick {XSS}")
    expect(page.locator(".tool img")).to_have_count(0)

    card.locator(".qcard-other-text").fill(XSS)
    card.get_by_role("button", name="Send answer").click()

    expect(card.locator(".qcard-answer")).to_have_text(f"You answered: {XSS}")
    expect(card.locator("img")).to_have_count(0)
    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed")
    assert dialogs == []


def test_a_question_answered_elsewhere_closes_the_card_here(
    open_chat: OpenChat, app_server: LiveServer, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    send_prompt(page, script(ask("Which database?", ["SQLite", "PostgreSQL"]), QUOTE))
    card = page.locator(".qcard.is-pending")
    expect(card).to_be_visible()
    question_id = card.get_attribute("data-question-id")

    other = login_client(app_server, "alice", "alice-password")
    response = other.post(
        "/api/askuser/submit-answer", json={"question_id": question_id, "selectedOptions": [0]}
    )
    assert response.status_code == 200, response.text

    answered = page.locator(f".qcard[data-question-id='{question_id}']")
    expect(answered.locator(".qcard-answer")).to_have_text("You answered: SQLite")
    expect(answered.locator(".qcard-form")).to_be_hidden()
    expect(last_reply(page)).to_contain_text("User selected: SQLite")
    expect(page).not_to_have_title(WAITING_TITLE)


def test_an_answer_in_one_tab_closes_the_card_in_another(
    open_chat: OpenChat, page: Any, app_server: LiveServer, browser: Any, alice: Any
) -> None:
    page.add_init_script(HOLD_EVENTS_AFTER_ANSWER)
    project = make_project(owner=alice)
    open_chat(project)
    send_prompt(page, script(ask("Ship it?", ["Yes", "No"]), QUOTE))
    expect(page.locator(".qcard.is-pending")).to_be_visible()
    expect(page).to_have_url(re.compile(r"\?c=\d+$"))

    context = browser.new_context()
    try:
        second = context.new_page()
        browser_login(second, app_server, "alice", "alice-password")
        second.goto(page.url)
        second.locator(".qcard-option", has_text="No").click()
        second.get_by_role("button", name="Send answer").click()
        expect(second.locator(".qcard-answer")).to_have_text("You answered: No")
    finally:
        context.close()

    # This tab's card leaves its input state at once and waits for Claude with the other tab.
    card = page.locator(".qcard")
    expect(card.locator(".qcard-sent")).to_have_text("Answered by you: No")
    expect(card.locator(".qcard-asked")).to_have_text("Ship it?")
    expect(card.locator(".qcard-status")).to_have_text(ANSWER_SENT)
    expect(card.locator(".qcard-form")).to_be_hidden()
    expect(card.locator(ENABLED_INPUTS)).to_have_count(0)
    expect(page).not_to_have_title(WAITING_TITLE)
    wait_until_claude_went_on(page)
    expect(card.locator(".qcard-answer")).to_have_count(0)
    release_events(page)

    expect(page.locator(".qcard-answer")).to_have_text("You answered: No")
    expect(card.locator(".qcard-status")).to_have_text(DELIVERED)
    expect(last_reply(page)).to_contain_text("User selected: No")


def test_a_colleagues_answer_says_who_answered(
    open_chat: OpenChat, page: Any, app_server: LiveServer, alice: Any, bob: Any
) -> None:
    page.add_init_script(HOLD_EVENTS_AFTER_ANSWER)
    project = make_project(owner=alice, members=(bob,))
    open_chat(project)
    send_prompt(page, script(ask("Which database?", ["SQLite", "PostgreSQL"]), QUOTE))
    expect(page.locator(".qcard.is-pending")).to_be_visible()
    question_id = page.locator(".qcard").get_attribute("data-question-id")

    colleague = login_client(app_server, "bob", "bob-password")
    response = colleague.post(
        "/api/askuser/submit-answer",
        json={"question_id": question_id, "selectedOptions": [0], "notes": "one file is enough"},
    )
    assert response.status_code == 200, response.text

    card = page.locator(".qcard")
    expect(card.locator(".qcard-sent")).to_have_text("Answered by bob: SQLite")
    expect(card.locator(".qcard-status")).to_have_text(ANSWER_SENT)
    expect(card.locator(".qcard-form")).to_be_hidden()
    expect(page).not_to_have_title(WAITING_TITLE)
    wait_until_claude_went_on(page)
    release_events(page)

    expect(card.locator(".qcard-answer")).to_have_text("bob answered: SQLite")
    expect(card.locator(".qcard-answer-notes")).to_have_text("Note: one file is enough")
    expect(card.locator(".qcard-status")).to_have_text(DELIVERED)
    expect(last_reply(page)).to_contain_text("User selected: SQLite")


def test_an_answer_claude_received_altered_shows_a_warning(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    page.add_init_script(HOLD_EVENTS_AFTER_ANSWER)
    project = make_project(owner=alice)
    open_chat(project)
    send_prompt(page, script(ask("Ship it?", ["Yes", "No"]), QUOTE))
    card = page.locator(".qcard")
    expect(card).to_have_class(re.compile(r"\bis-pending\b"))
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    expect(card.locator(".qcard-sent")).to_have_text("Answered by you: Yes")
    question_id = card.get_attribute("data-question-id")

    # The server reports a mismatch only when the CLI alters an answer, which it never does on cue.
    page.evaluate(
        "(id) => window.__injectEvent('ask_user_delivered', {question_id: id, ok: false, answers: {}})",
        question_id,
    )

    expect(card.locator(".qcard-answer")).to_have_text("You answered: Yes")
    expect(card.locator(".qcard-status")).to_have_text(
        "Warning: Claude received a different answer than the one sent."
    )
    expect(card.locator(".qcard-status")).to_be_visible()
    expect(card).to_have_class(re.compile(r"\bis-mismatch\b"))
    release_events(page)
    expect(page.locator("[data-role=status]")).to_have_text("Completed")


def test_a_question_replaced_by_a_newer_one_says_so(open_chat: OpenChat, page: Any, alice: Any) -> None:
    page.add_init_script(HOLD_EVENTS_AFTER_ANSWER)
    project = make_project(owner=alice)
    open_chat(project)
    send_prompt(page, script(ask("Which database?", ["SQLite", "PostgreSQL"]), QUOTE))
    card = page.locator(".qcard")
    expect(card).to_have_class(re.compile(r"\bis-pending\b"))
    question_id = card.get_attribute("data-question-id")

    page.evaluate(
        "(id) => window.__injectEvent('ask_user_expired', {question_id: id, reason: 'superseded'})",
        question_id,
    )

    expect(card.locator(".qcard-closed")).to_have_text("Replaced by a newer question")
    expect(card.locator(".qcard-asked")).to_have_text("Which database?")
    expect(card.locator(".qcard-form")).to_be_hidden()
    expect(page).not_to_have_title(WAITING_TITLE)
    # The run's end does not rewrite why the card closed.
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("[data-role=status]")).to_have_text("Cancelled")
    expect(card.locator(".qcard-closed")).to_have_text("Replaced by a newer question")


def test_a_pending_question_comes_back_after_a_reload(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    send_prompt(page, script(ask("Still there?", ["Yes", "No"]), QUOTE))
    expect(page.locator(".qcard.is-pending")).to_be_visible()

    page.reload()

    card = page.locator(".qcard")
    expect(card).to_have_count(1)
    expect(card).to_have_class(re.compile(r"\bis-pending\b"))
    expect(page).to_have_title(WAITING_TITLE)
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    expect(card.locator(".qcard-answer")).to_have_text("You answered: Yes")
    expect(last_reply(page)).to_contain_text("User selected: Yes")


def test_cancelling_the_run_cancels_its_question(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    send_prompt(page, script(ask("Wait for me?", ["Yes"]), QUOTE))
    expect(page.locator(".qcard.is-pending")).to_be_visible()

    page.get_by_role("button", name="Cancel").click()

    card = page.locator(".qcard")
    expect(card.locator(".qcard-closed")).to_contain_text("Question cancelled")
    expect(card.locator(".qcard-closed")).to_have_text("Question cancelled (the run ended)")
    expect(card.locator(".qcard-form")).to_be_hidden()
    expect(page.locator("[data-role=status]")).to_have_text("Cancelled")
    expect(page).not_to_have_title(WAITING_TITLE)
    expect(page.locator(PROMPT)).to_be_enabled()


def test_an_unanswered_question_times_out_on_the_card(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice, ask_user_timeout=30)
    page = open_chat(project)
    send_prompt(page, script(ask("Anyone there?", ["Yes"]), QUOTE))
    card = page.locator(".qcard")
    expect(card.locator(".qcard-countdown")).to_have_class(re.compile(r"\bis-urgent\b"))

    expect(card.locator(".qcard-closed")).to_contain_text("Question timed out", timeout=60_000)
    expect(card.locator(".qcard-closed strong")).to_have_text("Question timed out")
    expect(card.locator(".qcard-form")).to_be_hidden()
    expect(last_reply(page)).to_contain_text("User did not respond within 30 seconds")
    expect(page).not_to_have_title(WAITING_TITLE)


FAKE_NOTIFICATIONS = """
window.__shown = [];
window.__asked = 0;
class FakeNotification {
  constructor(title, options) { window.__shown.push({ title, body: options.body }); }
  addEventListener() {}
}
FakeNotification.permission = "default";
FakeNotification.requestPermission = async () => {
  window.__asked += 1;
  FakeNotification.permission = "granted";
  return "granted";
};
window.Notification = FakeNotification;
document.hasFocus = () => false;
"""


def test_notification_permission_is_asked_once_and_a_question_notifies(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    page.add_init_script(FAKE_NOTIFICATIONS)
    project = make_project(owner=alice)
    open_chat(project)
    assert page.evaluate("window.__asked") == 0

    send_prompt(page, script(ask("Which database?", ["SQLite", "PostgreSQL"]), QUOTE))

    expect(page.locator(".qcard.is-pending")).to_be_visible()
    page.wait_for_function("() => window.__shown.length === 1")
    assert page.evaluate("window.__shown") == [
        {"title": "Claude is waiting for your answer", "body": "Which database?"}
    ]
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    wait_until_the_run_ended(page)
    send_prompt(page, script({"text": "again"}))
    expect(last_reply(page)).to_have_text("again")
    assert page.evaluate("window.__asked") == 1
