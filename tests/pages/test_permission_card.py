"""Permission cards in a real browser: a tool call waiting for approval, decided on the card.

Most requests reach the page as the server sends them, appended to the run's real event stream
(``core.events``) while a real run streams, and served by the real SSE view: so every preview
shape and every ending can be shown on cue. The last tests take the whole real path: the real
CLI asks for a real Bash call, the card decides it through the real decision endpoint.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from core.events import append_event_sync
from promptmgr.models import Run
from tests.helpers import QUOTE, make_project, script
from tests.pages.chat import OpenChat, StubClicks, last_reply, send_prompt
from tests.pages.test_question_card import FAKE_NOTIFICATIONS, WAITING_TITLE, XSS

pytestmark = pytest.mark.browser

DENY_LABEL = "Message for Claude if you deny (optional)"
DANGER_RGB = "rgb(201, 42, 42)"
RULE = "Bash(npm test:*)"
# Claude streams this slowly for minutes: the run stays running while the test appends events.
SLOW_REPLY = {"text": "Working on it. " * 40, "pace_ms": 500, "chunk_chars": 1}


def start_running(page: Any, project: Any) -> int:
    """Send a prompt whose run keeps streaming; returns the run id once it runs."""
    send_prompt(page, script(SLOW_REPLY))
    expect(page.locator("[data-role=status]")).to_have_text("Running", timeout=30_000)
    return int(Run.objects.get(conversation__project=project).pk)


def bash_request(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "request_id": str(uuid.uuid4()),
        "kind": "permission",
        "source": "mcp",
        "tool_name": "Bash",
        "tool_use_id": f"toolu_{uuid.uuid4().hex[:24]}",
        "input": {"command": "npm test", "description": "Run the test suite"},
        "preview": {"type": "bash", "command": "npm test", "description": "Run the test suite"},
        "suggested_rule": RULE,
        "expires_at": (datetime.now(UTC) + timedelta(seconds=300)).isoformat(),
        "timeout": 300,
    }
    data.update(fields)
    return data


def request_for(tool_name: str, tool_input: dict[str, Any], preview: Any, **fields: Any) -> dict[str, Any]:
    return bash_request(tool_name=tool_name, input=tool_input, preview=preview, **fields)


def card_of(page: Any, data: dict[str, Any]) -> Any:
    return page.locator(f".pcard[data-request-id='{data['request_id']}']")


class DecisionEndpoint(StubClicks):
    """Records the decisions the page sends (over the click channel, else the endpoint) and
    answers 200 as the contract says: ``{request_id, decision, rule, decided_at}``, the rule
    being the one "always" added."""

    def __init__(self, page: Any, *, channel: bool = True) -> None:
        super().__init__(page, "decision", self.answer, channel=channel)

    @staticmethod
    def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {
            "request_id": body["request_id"],
            "decision": body["decision"],
            "rule": RULE if body["decision"] == "always" else None,
            "decided_at": datetime.now(UTC).isoformat(),
        }


# --- Deciding -------------------------------------------------------------------------


def test_allow_once_sends_allow_over_the_click_channel_and_collapses_the_card(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    endpoint = DecisionEndpoint(page)
    run_id = start_running(page, project)
    data = bash_request()

    append_event_sync(run_id, "permission_request", data)

    card = card_of(page, data)
    expect(card).to_be_visible()
    expect(card.locator(".pcard-headline")).to_have_text("Claude wants to run a command Bash")
    expect(card.locator(".pcard-command")).to_have_text("npm test")
    expect(card.locator(".pcard-description")).to_have_text("Run the test suite")
    expect(card.locator(".qcard-countdown")).to_have_text(re.compile(r"^[45]:\d\d left$"))
    expect(page).to_have_title(WAITING_TITLE)

    card.get_by_role("button", name="Allow once").click()

    expect(card.locator(".pcard-outcome")).to_have_text("Allowed once by alice")
    assert endpoint.bodies == [{"request_id": data["request_id"], "decision": "allow"}]
    assert endpoint.ways == ["channel"]
    expect(card.get_by_role("button")).to_have_count(0)
    expect(card.locator(".pcard-preview")).to_be_hidden()
    expect(card.locator(".pcard-what")).to_have_text("npm test")
    expect(page).not_to_have_title(WAITING_TITLE)


def test_without_the_click_channel_the_decision_posts_with_the_csrf_header(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    endpoint = DecisionEndpoint(page, channel=False)
    run_id = start_running(page, project)
    data = bash_request()
    append_event_sync(run_id, "permission_request", data)

    card = card_of(page, data)
    card.get_by_role("button", name="Allow once").click()

    expect(card.locator(".pcard-outcome")).to_have_text("Allowed once by alice")
    assert endpoint.bodies == [{"request_id": data["request_id"], "decision": "allow"}]
    assert endpoint.ways == ["endpoint"]
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    assert endpoint.headers[0]["x-csrftoken"] == csrf


def test_always_allow_shows_the_exact_rule_and_posts_always(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    endpoint = DecisionEndpoint(page)
    run_id = start_running(page, project)
    data = bash_request()
    append_event_sync(run_id, "permission_request", data)
    card = card_of(page, data)

    always = card.get_by_role("button", name="Always allow Bash(npm test:*)")
    expect(always.locator(".pcard-rule")).to_have_text("Bash(npm test:*)")
    always.click()

    expect(card.locator(".pcard-outcome")).to_have_text("Always allowed by alice: Bash(npm test:*)")
    assert endpoint.bodies == [{"request_id": data["request_id"], "decision": "always"}]


def test_deny_posts_the_message_typed_for_claude(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    endpoint = DecisionEndpoint(page)
    run_id = start_running(page, project)
    data = bash_request()
    append_event_sync(run_id, "permission_request", data)
    card = card_of(page, data)

    card.get_by_label(DENY_LABEL).fill(f"Use yarn instead {XSS}")
    card.get_by_role("button", name="Deny").click()

    expect(card.locator(".pcard-outcome")).to_have_text(f"Denied by alice: Use yarn instead {XSS}")
    assert endpoint.bodies == [
        {"request_id": data["request_id"], "decision": "deny", "message": f"Use yarn instead {XSS}"}
    ]
    expect(card.locator("img")).to_have_count(0)
    # Denied is a decision, not a failure: nothing on the card is coloured as an error.
    assert card.locator(".pcard-outcome strong").evaluate("e => getComputedStyle(e).color") != DANGER_RGB


def test_deny_without_a_message_posts_no_message(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    endpoint = DecisionEndpoint(page)
    run_id = start_running(page, project)
    data = bash_request()
    append_event_sync(run_id, "permission_request", data)
    card = card_of(page, data)

    card.get_by_label(DENY_LABEL).fill("   ")
    card.get_by_role("button", name="Deny").click()

    expect(card.locator(".pcard-outcome")).to_have_text("Denied by alice")
    assert endpoint.bodies == [{"request_id": data["request_id"], "decision": "deny"}]


def test_a_request_without_a_suggested_rule_offers_no_always_option(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    data = bash_request(suggested_rule=None)
    append_event_sync(run_id, "permission_request", data)
    card = card_of(page, data)

    expect(card.get_by_role("button")).to_have_text(["Allow once", "Deny"])
    expect(card.get_by_text("Always allow")).to_have_count(0)


# --- Keyboard, title and notification ---------------------------------------------------


def test_the_card_takes_the_keyboard_escape_does_nothing_and_enter_acts_on_the_focused_button(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    endpoint = DecisionEndpoint(page)
    run_id = start_running(page, project)
    data = bash_request()
    append_event_sync(run_id, "permission_request", data)
    card = card_of(page, data)

    expect(card).to_be_focused()
    page.keyboard.press("Escape")
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    expect(card).to_be_focused()
    expect(card.get_by_role("button", name="Allow once")).to_be_enabled()
    page.keyboard.press("Tab")
    expect(card.get_by_role("button", name="Allow once")).to_be_focused()
    page.keyboard.press("Escape")
    expect(card.get_by_role("button", name="Allow once")).to_be_enabled()
    assert endpoint.bodies == []
    page.keyboard.press("Tab")
    expect(card.get_by_role("button", name="Always allow Bash(npm test:*)")).to_be_focused()
    page.keyboard.press("Enter")

    expect(card.locator(".pcard-outcome")).to_have_text("Always allowed by alice: Bash(npm test:*)")
    assert endpoint.bodies == [{"request_id": data["request_id"], "decision": "always"}]


def test_enter_in_the_message_denies_and_shift_enter_starts_a_new_line(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    endpoint = DecisionEndpoint(page)
    run_id = start_running(page, project)
    data = bash_request()
    append_event_sync(run_id, "permission_request", data)
    message = card_of(page, data).get_by_label(DENY_LABEL)

    message.type("not now")
    message.press("Shift+Enter")
    message.type("tests are slow")
    expect(message).to_have_value("not now\ntests are slow")
    message.press("Enter")

    expect(card_of(page, data).locator(".pcard-outcome")).to_have_text(
        "Denied by alice: not now\ntests are slow"
    )
    assert endpoint.bodies == [
        {"request_id": data["request_id"], "decision": "deny", "message": "not now\ntests are slow"}
    ]


def test_a_waiting_request_notifies_with_the_tool_and_what_it_would_do(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    page.add_init_script(FAKE_NOTIFICATIONS)
    project = make_project(owner=alice)
    open_chat(project)
    run_id = start_running(page, project)
    data = bash_request()

    append_event_sync(run_id, "permission_request", data)

    expect(card_of(page, data)).to_be_visible()
    page.wait_for_function("() => window.__shown.length === 1")
    assert page.evaluate("window.__shown") == [
        {"title": "Claude is waiting for your answer", "body": "Bash: npm test"}
    ]
    expect(page).to_have_title(WAITING_TITLE)


# --- Previews -----------------------------------------------------------------------------


def test_a_diff_preview_shows_the_path_counts_and_coloured_lines_as_text(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    dialogs: list[str] = []

    def record(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", record)
    project = make_project(owner=alice)
    open_chat(project)
    run_id = start_running(page, project)
    diff = "\n".join(
        [
            "--- a/src/app.js",
            "+++ b/src/app.js",
            "@@ -1,3 +1,4 @@",
            " const a = 1;",
            f"-const b = '{XSS}';",
            "+const b = '<script>alert(2)</script>';",
            "+const c = 3;",
            " export { a };",
        ]
    )
    edit_input = {"file_path": "/w/src/app.js", "old_string": XSS, "new_string": "<b>x</b>"}
    preview = {"type": "diff", "path": "src/app.js", "diff": diff, "additions": 2, "deletions": 1}
    data = request_for("Edit", edit_input, preview, suggested_rule=None)

    append_event_sync(run_id, "permission_request", data)

    card = card_of(page, data)
    expect(card.locator(".pcard-headline")).to_have_text("Claude wants to change a file Edit")
    expect(card.locator(".pcard-path")).to_have_text("src/app.js")
    expect(card.locator(".pcard-additions")).to_have_text("+2")
    expect(card.locator(".pcard-deletions")).to_have_text("−1")
    expect(card.locator(".pcard-line.is-add")).to_have_text(
        ["+const b = '<script>alert(2)</script>';", "+const c = 3;"]
    )
    expect(card.locator(".pcard-line.is-del")).to_have_text([f"-const b = '{XSS}';"])
    expect(card.locator(".pcard-line.is-hunk")).to_have_text(["@@ -1,3 +1,4 @@"])
    expect(card.locator(".pcard-line")).to_have_count(8)
    expect(card.locator("img, script, b")).to_have_count(0)
    added = card.locator(".pcard-line.is-add").first.evaluate("e => getComputedStyle(e).backgroundColor")
    removed = card.locator(".pcard-line.is-del").first.evaluate("e => getComputedStyle(e).backgroundColor")
    context = card.locator(".pcard-line").nth(3).evaluate("e => getComputedStyle(e).backgroundColor")
    assert len({added, removed, context}) == 3
    assert dialogs == []


def test_a_new_file_preview_shows_its_path_and_content(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    content = "# Notes\n\n<em>first</em> line\n"
    preview = {"type": "write", "path": "docs/NOTES.md", "content": content}
    data = request_for("Write", {"file_path": "/w/docs/NOTES.md", "content": content}, preview)

    append_event_sync(run_id, "permission_request", data)

    card = card_of(page, data)
    expect(card.locator(".pcard-headline")).to_have_text("Claude wants to create a file Write")
    expect(card.locator(".pcard-path")).to_have_text("docs/NOTES.md")
    expect(card.locator(".pcard-new-file")).to_have_text("new file")
    assert card.locator(".pcard-content").text_content() == content
    expect(card.locator("em")).to_have_count(0)


def test_a_fetch_preview_shows_the_url_as_text_not_a_link(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    url = "https://example.com/docs?q=<x>&y=1"
    preview = {"type": "url", "url": url, "prompt": "Summarise the install steps"}
    data = request_for("WebFetch", {"url": url, "prompt": "Summarise the install steps"}, preview)

    append_event_sync(run_id, "permission_request", data)

    card = card_of(page, data)
    expect(card.locator(".pcard-headline")).to_have_text("Claude wants to fetch a web page WebFetch")
    expect(card.locator(".pcard-url")).to_have_text(url)
    expect(card.locator(".pcard-prompt")).to_have_text("Summarise the install steps")
    expect(card.locator("a")).to_have_count(0)


def test_an_mcp_preview_shows_server_tool_and_pretty_arguments(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    arguments = {"repo": "acme/web", "labels": ["bug", "<i>p1</i>"]}
    preview = {"type": "mcp", "server": "github", "tool": "create_issue", "arguments": arguments}
    data = request_for("mcp__github__create_issue", arguments, preview)

    append_event_sync(run_id, "permission_request", data)

    card = card_of(page, data)
    expect(card.locator(".pcard-headline")).to_have_text(
        "Claude wants to use an MCP tool github › create_issue"
    )
    expect(card.locator(".pcard-mcp-server")).to_have_text("github")
    expect(card.locator(".pcard-mcp-tool")).to_have_text("create_issue")
    assert card.locator(".pcard-json").text_content() == json.dumps(arguments, indent=2)
    expect(card.locator("i")).to_have_count(0)


def test_a_json_preview_shows_the_servers_text(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    text = '{\n  "pattern": "TODO",\n  "path": "src"\n}'
    data = request_for("Grep", {"pattern": "TODO", "path": "src"}, {"type": "json", "json": text})

    append_event_sync(run_id, "permission_request", data)

    card = card_of(page, data)
    expect(card.locator(".pcard-headline")).to_have_text("Claude wants to use a tool Grep")
    assert card.locator(".pcard-json").text_content() == text


MALFORMED_PREVIEWS: list[Any] = [
    {"type": "notebook", "cells": 3},
    {"type": "bash", "command": ["rm", "-rf"]},
    {"type": "diff", "path": "a.py"},
    {"type": "json", "json": {"not": "text"}},
    {"type": "__proto__"},
    {"type": "toString"},
    {"command": "ls"},
    "bash",
    [],
    None,
    42,
]


def test_an_unknown_or_malformed_preview_falls_back_to_the_tool_input_as_json(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    endpoint = DecisionEndpoint(page)
    run_id = start_running(page, project)
    tool_input = {"notebook_path": "a.ipynb", "cell": XSS}
    requests = [request_for("NotebookEdit", tool_input, preview) for preview in MALFORMED_PREVIEWS]

    for data in requests:
        append_event_sync(run_id, "permission_request", data)

    expect(page.locator(".pcard")).to_have_count(len(MALFORMED_PREVIEWS))
    for data in requests:
        card = card_of(page, data)
        expect(card.locator(".pcard-preview.is-fallback")).to_be_visible()
        expect(card.locator(".pcard-headline")).to_have_text("Claude wants to use a tool NotebookEdit")
        assert card.locator(".pcard-json").text_content() == json.dumps(tool_input, indent=2), data["preview"]
    expect(page.locator(".pcard img")).to_have_count(0)
    last = card_of(page, requests[-1])
    last.get_by_role("button", name="Allow once").click()
    expect(last.locator(".pcard-outcome")).to_have_text("Allowed once by alice")
    assert endpoint.bodies == [{"request_id": requests[-1]["request_id"], "decision": "allow"}]


def test_a_request_without_a_preview_or_input_still_shows_a_card(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    data = bash_request()
    for key in ("preview", "input", "expires_at", "tool_name"):
        del data[key]

    append_event_sync(run_id, "permission_request", data)

    card = card_of(page, data)
    assert card.locator(".pcard-json").text_content() == "{}"
    expect(card.locator(".qcard-countdown")).to_have_text("")
    expect(card.get_by_role("button", name="Allow once")).to_be_enabled()


def test_a_long_preview_is_cut_short_until_show_all(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    many_lines = "\n".join(f"line {n}" for n in range(1, 101))
    one_long_line = "x" * 9000
    tall = request_for("Write", {}, {"type": "write", "path": "big.txt", "content": many_lines})
    wide = request_for("Bash", {}, {"type": "bash", "command": one_long_line, "description": ""})
    small = request_for("Bash", {}, {"type": "bash", "command": "\n".join(["echo"] * 40)})

    for data in (tall, wide, small):
        append_event_sync(run_id, "permission_request", data)

    content = card_of(page, tall).locator(".pcard-content")
    expect(content).to_have_class(re.compile(r"\bis-truncated\b"))
    assert content.text_content() == "\n".join(f"line {n}" for n in range(1, 41))
    command = card_of(page, wide).locator(".pcard-command")
    assert command.text_content() == "x" * 4000
    expect(card_of(page, small).get_by_role("button", name=re.compile("^Show all"))).to_have_count(0)
    assert card_of(page, small).locator(".pcard-command").text_content() == "\n".join(["echo"] * 40)

    card_of(page, tall).get_by_role("button", name="Show all 100 lines").click()
    card_of(page, wide).get_by_role("button", name=re.compile(r"^Show all 9,?000 characters$")).click()

    assert content.text_content() == many_lines
    assert command.text_content() == one_long_line
    expect(content).not_to_have_class(re.compile(r"\bis-truncated\b"))
    expect(page.get_by_role("button", name=re.compile("^Show all"))).to_have_count(0)


def test_a_long_diff_keeps_its_colours_when_shown_in_full(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    diff = "\n".join(["@@ -1,60 +1,60 @@", *(f"+added {n}" for n in range(60))])
    data = request_for(
        "Edit", {}, {"type": "diff", "path": "a.txt", "diff": diff, "additions": 60, "deletions": 0}
    )
    append_event_sync(run_id, "permission_request", data)
    card = card_of(page, data)
    expect(card.locator(".pcard-line")).to_have_count(40)

    card.get_by_role("button", name="Show all 61 lines").click()

    expect(card.locator(".pcard-line.is-add")).to_have_count(60)
    expect(card.locator(".pcard-line.is-hunk")).to_have_count(1)


# --- Several at once, decided elsewhere, expired, and after a reload -------------------------


def test_parallel_requests_are_each_decided_on_their_own_card(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    endpoint = DecisionEndpoint(page)
    run_id = start_running(page, project)
    first = bash_request()
    second = request_for("Bash", {"command": "npm run lint"}, {"type": "bash", "command": "npm run lint"})
    third = bash_request(suggested_rule=None)
    for data in (first, second, third):
        append_event_sync(run_id, "permission_request", data)
    expect(page.locator(".pcard.is-pending")).to_have_count(3)

    # The first, the oldest, is decided here; the newest elsewhere; the middle one stays open.
    card_of(page, first).get_by_role("button", name="Allow once").click()
    append_event_sync(
        run_id,
        "permission_decided",
        {
            "request_id": third["request_id"],
            "decision": "deny",
            "by": "bob",
            "rule": None,
            "message": "not on main",
            "decided_at": datetime.now(UTC).isoformat(),
        },
    )

    expect(card_of(page, first).locator(".pcard-outcome")).to_have_text("Allowed once by alice")
    expect(card_of(page, third).locator(".pcard-outcome")).to_have_text("Denied by bob: not on main")
    middle = card_of(page, second)
    expect(middle).to_have_class(re.compile(r"\bis-pending\b"))
    expect(middle.get_by_role("button", name="Allow once")).to_be_enabled()
    expect(page).to_have_title(WAITING_TITLE)
    assert endpoint.bodies == [{"request_id": first["request_id"], "decision": "allow"}]

    middle.get_by_role("button", name="Deny").click()

    expect(middle.locator(".pcard-outcome")).to_have_text("Denied by alice")
    assert endpoint.bodies[1] == {"request_id": second["request_id"], "decision": "deny"}
    expect(page).not_to_have_title(WAITING_TITLE)


def decided(
    data: dict[str, Any], decision: str, by: str, rule: str | None = None, message: str = ""
) -> dict[str, Any]:
    return {
        "request_id": data["request_id"],
        "decision": decision,
        "by": by,
        "rule": rule,
        "message": message,
        "decided_at": datetime.now(UTC).isoformat(),
    }


OUTCOMES = [
    "Allowed once by alice",
    "Always allowed by bob: Bash(npm test:*)",
    f"Denied by alice: {XSS}",
    "Expired",
    "Cancelled",
]


def append_each_ending(run_id: int) -> list[dict[str, Any]]:
    """Five requests, each closed by the server its own way (OUTCOMES, in order)."""
    requests = [bash_request() for _ in OUTCOMES]
    for data in requests:
        append_event_sync(run_id, "permission_request", data)
    append_event_sync(run_id, "permission_decided", decided(requests[0], "allow", "alice"))
    append_event_sync(run_id, "permission_decided", decided(requests[1], "always", "bob", "Bash(npm test:*)"))
    append_event_sync(run_id, "permission_decided", decided(requests[2], "deny", "alice", message=XSS))
    append_event_sync(
        run_id, "permission_expired", {"request_id": requests[3]["request_id"], "reason": "timeout"}
    )
    append_event_sync(
        run_id, "permission_expired", {"request_id": requests[4]["request_id"], "reason": "cancelled"}
    )
    return requests


def expect_each_ending(page: Any, requests: list[dict[str, Any]]) -> None:
    expect(page.locator(".pcard")).to_have_count(len(OUTCOMES))
    for data, outcome in zip(requests, OUTCOMES, strict=True):
        card = card_of(page, data)
        expect(card.locator(".pcard-outcome")).to_have_text(outcome)
        expect(card.locator(".pcard-what")).to_have_text("npm test")
        expect(card.get_by_role("button")).to_have_count(0)
        expect(card.locator(".pcard-preview")).to_be_hidden()
    for data in requests[3:]:
        card = card_of(page, data)
        expect(card.locator(".pcard-error")).to_be_hidden()
        expect(card.locator("[role=alert]:visible")).to_have_count(0)
        assert card.locator(".pcard-outcome strong").evaluate("e => getComputedStyle(e).color") != DANGER_RGB
        assert card.evaluate("e => getComputedStyle(e).borderTopColor") != DANGER_RGB
    expect(page.locator(".pcard img")).to_have_count(0)
    expect(page).not_to_have_title(WAITING_TITLE)


def test_decided_and_expired_requests_read_the_same_live_and_after_reloads(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)

    requests = append_each_ending(run_id)
    expect_each_ending(page, requests)

    # Still running: the reload replays the run's stream from its first event.
    page.reload()
    expect(page.locator("[data-role=status]")).to_have_text("Running")
    expect_each_ending(page, requests)

    # Ended: the reload shows the history the database kept.
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("[data-role=status]")).to_have_text("Cancelled", timeout=30_000)
    page.reload()
    expect(page.locator(".run-footer .status-chip")).to_have_text("Cancelled")
    expect_each_ending(page, requests)


def test_a_decision_on_the_card_reads_the_same_after_a_reload(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    DecisionEndpoint(page)
    run_id = start_running(page, project)
    data = bash_request()
    append_event_sync(run_id, "permission_request", data)
    card = card_of(page, data)
    card.get_by_label(DENY_LABEL).fill("not yet")
    card.get_by_role("button", name="Deny").click()
    expect(card.locator(".pcard-outcome")).to_have_text("Denied by alice: not yet")
    # What the server sends on a decision; the card already says it and stays as it is.
    append_event_sync(run_id, "permission_decided", decided(data, "deny", "alice", message="not yet"))
    expect(card.locator(".pcard-outcome")).to_have_text("Denied by alice: not yet")

    page.reload()

    expect(card.locator(".pcard-outcome")).to_have_text("Denied by alice: not yet")
    expect(card.get_by_role("button")).to_have_count(0)


def test_a_request_still_open_comes_back_after_a_reload(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    data = bash_request()
    append_event_sync(run_id, "permission_request", data)
    expect(card_of(page, data)).to_be_visible()

    page.reload()

    card = card_of(page, data)
    expect(card).to_have_class(re.compile(r"\bis-pending\b"))
    expect(card.get_by_role("button", name="Allow once")).to_be_enabled()
    expect(page).to_have_title(WAITING_TITLE)


def test_the_run_ending_cancels_an_open_request(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    data = bash_request()
    append_event_sync(run_id, "permission_request", data)
    card = card_of(page, data)
    expect(card).to_have_class(re.compile(r"\bis-pending\b"))

    page.get_by_role("button", name="Cancel").click()

    expect(card.locator(".pcard-outcome")).to_have_text("Cancelled", timeout=30_000)
    expect(card.get_by_role("button")).to_have_count(0)
    expect(page).not_to_have_title(WAITING_TITLE)
    page.reload()
    expect(card_of(page, data).locator(".pcard-outcome")).to_have_text("Cancelled")


def test_an_expiry_after_a_decision_leaves_the_decision(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    run_id = start_running(page, project)
    data = bash_request()
    append_event_sync(run_id, "permission_request", data)
    append_event_sync(run_id, "permission_decided", decided(data, "allow", "bob"))
    append_event_sync(run_id, "permission_expired", {"request_id": data["request_id"], "reason": "timeout"})

    expect(card_of(page, data).locator(".pcard-outcome")).to_have_text("Allowed once by bob")


# --- What the decision endpoint refuses ------------------------------------------------------


def test_a_409_or_410_answer_ends_the_card_with_the_servers_sentence(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    project = make_project(owner=alice)
    open_chat(project)
    answers = {
        "already": (409, {"detail": "This request was already decided.", "code": "already_decided"}),
        "expired": (410, {"detail": "This request expired before the decision.", "code": "expired"}),
        "cancelled": (410, {"detail": "The run ended; nothing waits for this.", "code": "cancelled"}),
    }
    refused: dict[str, str] = {}
    StubClicks(page, "decision", lambda body: answers[refused[body["request_id"]]])
    run_id = start_running(page, project)
    requests = {name: bash_request() for name in answers}
    for name, data in requests.items():
        refused[data["request_id"]] = name
        append_event_sync(run_id, "permission_request", data)

    for data in requests.values():
        card_of(page, data).get_by_role("button", name="Allow once").click()

    expected = {
        "already": "Already decided — This request was already decided.",
        "expired": "Expired — This request expired before the decision.",
        "cancelled": "Cancelled — The run ended; nothing waits for this.",
    }
    for name, data in requests.items():
        card = card_of(page, data)
        expect(card.locator(".pcard-outcome")).to_have_text(expected[name])
        expect(card.get_by_role("button")).to_have_count(0)
    expect(page).not_to_have_title(WAITING_TITLE)
    # The decision the other tab made arrives later and replaces the refusal.
    append_event_sync(
        run_id, "permission_decided", decided(requests["already"], "always", "bob", "Bash(npm test:*)")
    )
    expect(card_of(page, requests["already"]).locator(".pcard-outcome")).to_have_text(
        "Always allowed by bob: Bash(npm test:*)"
    )


def test_a_404_or_422_answer_shows_the_servers_sentence_and_keeps_the_card_open(
    open_chat: OpenChat, page: Any, alice: Any
) -> None:
    project = make_project(owner=alice)
    open_chat(project)
    answers = {
        "unknown": (404, {"detail": "No such request, or it is not yours.", "code": "not_found"}),
        "invalid": (422, {"detail": "The request is not valid: decision: bad value", "code": "invalid"}),
    }
    refused: dict[str, str] = {}
    stub = StubClicks(page, "decision", lambda body: answers[refused[body["request_id"]]])
    run_id = start_running(page, project)
    requests = {name: bash_request() for name in answers}
    for name, data in requests.items():
        refused[data["request_id"]] = name
        append_event_sync(run_id, "permission_request", data)

    for name, data in requests.items():
        card = card_of(page, data)
        card.get_by_role("button", name="Allow once").click()
        expect(card.locator(".pcard-error")).to_have_text(answers[name][1]["detail"])
        expect(card.get_by_role("button", name="Allow once")).to_be_enabled()
        expect(card).to_have_class(re.compile(r"\bis-pending\b"))
    expect(page).to_have_title(WAITING_TITLE)

    # Still open: the user can try again, and the sentence shows again.
    card = card_of(page, requests["unknown"])
    card.get_by_role("button", name="Deny").click()
    stub.wait_for(3)
    expect(card.locator(".pcard-error")).to_have_text(answers["unknown"][1]["detail"])
    expect(card.get_by_role("button", name="Deny")).to_be_enabled()
    assert [(body["request_id"], body["decision"]) for body in stub.bodies] == [
        (requests["unknown"]["request_id"], "allow"),
        (requests["invalid"]["request_id"], "allow"),
        (requests["unknown"]["request_id"], "deny"),
    ]


# --- The real path: the real CLI asks, the real endpoint decides ----------------------------

COMMAND = "mkdir -p build && echo approved-$((6*7))"


def ask_to_run(page: Any, project: Any) -> Any:
    """Claude calls Bash with a command that needs approval (not read-only); returns its card."""
    bash = {"tool_use": {"name": "Bash", "input": {"command": COMMAND, "description": "Say it"}}}
    send_prompt(page, script(bash, QUOTE))
    card = page.locator(".pcard")
    expect(card).to_be_visible(timeout=30_000)
    return card


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_allow_once_on_a_real_bash_call_runs_it_and_claude_gets_its_output(
    open_chat: OpenChat, alice: Any, engine: str
) -> None:
    project = make_project(owner=alice, engine=engine, permission_mode="default")
    page = open_chat(project)

    card = ask_to_run(page, project)

    expect(card).to_be_focused()
    expect(card.locator(".pcard-command")).to_have_text(COMMAND)
    expect(card.locator(".pcard-description")).to_have_text("Say it")
    expect(card.get_by_role("button", name=f"Always allow Bash({COMMAND})")).to_be_visible()
    expect(page).to_have_title(WAITING_TITLE)
    card.get_by_role("button", name="Allow once").click()

    expect(card.locator(".pcard-outcome")).to_have_text("Allowed once by alice")
    expect(last_reply(page)).to_contain_text('"text": "approved-42"', timeout=30_000)
    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed")
    expect(page).not_to_have_title(WAITING_TITLE)
    page.reload()
    expect(page.locator(".pcard .pcard-outcome")).to_have_text("Allowed once by alice")
    expect(page.locator(".pcard").get_by_role("button")).to_have_count(0)


def test_deny_on_a_real_bash_call_tells_claude_the_message(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice, permission_mode="default")
    page = open_chat(project)
    card = ask_to_run(page, project)

    card.get_by_label(DENY_LABEL).fill("use the Makefile instead")
    card.get_by_role("button", name="Deny").click()

    expect(card.locator(".pcard-outcome")).to_have_text("Denied by alice: use the Makefile instead")
    expect(last_reply(page)).to_contain_text("use the Makefile instead", timeout=30_000)
    expect(last_reply(page)).not_to_contain_text("approved-42")
    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed")


def test_cancelling_the_run_cancels_its_real_request_without_an_error_look(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice, permission_mode="default")
    page = open_chat(project)
    card = ask_to_run(page, project)

    page.get_by_role("button", name="Cancel").click()

    expect(card.locator(".pcard-outcome")).to_have_text("Cancelled", timeout=30_000)
    expect(card.get_by_role("button")).to_have_count(0)
    expect(card.locator(".pcard-error")).to_be_hidden()
    assert card.locator(".pcard-outcome strong").evaluate("e => getComputedStyle(e).color") != DANGER_RGB
    expect(page).not_to_have_title(WAITING_TITLE)
