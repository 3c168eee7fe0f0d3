"""The chat workspace in a real browser: streaming, tool calls, reload, Cancel, conversations."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from promptmgr.models import Conversation
from tests.helpers import make_project, script
from tests.pages.chat import PROMPT, OpenChat, last_reply, send_prompt, wait_until_the_run_ended

pytestmark = pytest.mark.browser

SLOW_TEXT = {"text": "z" * 400, "pace_ms": 50, "chunk_chars": 2}


def test_a_prompt_streams_its_answer_and_a_reload_shows_the_conversation_again(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice, name="Alpha")
    page = open_chat(project)
    expect(page.locator(".chat-project")).to_have_text("Alpha")

    send_prompt(page, script({"text": "Hello from **the scripted model**.", "pace_ms": 60, "chunk_chars": 1}))

    # Plain text while it streams, then the server's sanitized Markdown.
    expect(page.locator(".msg-text.is-streaming")).to_be_visible()
    expect(last_reply(page).locator("strong")).to_have_text("the scripted model")
    footer = page.locator(".run-footer")
    expect(footer.locator(".status-chip")).to_have_text("Completed")
    expect(footer.locator(".run-cost")).to_have_text(re.compile(r"^\$\d+\.\d+$"))
    expect(footer.locator(".run-duration")).to_have_text(re.compile(r"\d"))
    expect(page.locator("[data-role=status]")).to_have_text("Completed")
    conversation = Conversation.objects.get(project=project)
    expect(page).to_have_url(re.compile(rf"\?c={conversation.pk}$"))
    expect(page.locator(".chat-conversation.is-current")).to_have_count(1)

    page.reload()

    expect(page.locator(".msg-user")).to_have_count(1)
    expect(page.locator(".msg-user .msg-text")).to_have_text(
        script({"text": "Hello from **the scripted model**.", "pace_ms": 60, "chunk_chars": 1})
    )
    expect(page.locator(".msg-claude")).to_have_count(1)
    expect(last_reply(page)).to_have_text("Hello from the scripted model.")
    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed")
    expect(page.locator(PROMPT)).to_be_enabled()


def test_the_next_prompt_continues_the_same_conversation(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    send_prompt(page, script({"text": "First answer."}))
    expect(last_reply(page)).to_have_text("First answer.")
    wait_until_the_run_ended(page)

    send_prompt(page, script({"text": "Second answer."}))

    expect(last_reply(page)).to_have_text("Second answer.")
    expect(page.locator(".run")).to_have_count(2)
    assert Conversation.objects.filter(project=project).count() == 1
    expect(page.locator(".chat-conversation")).to_have_count(1)


def test_tool_calls_are_compact_and_expand_to_input_and_result(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice, context="Use tabs, never spaces.")
    # Relative: the run works in its conversation's worktree, where the context is written.
    claude_md = "CLAUDE.local.md"
    page = open_chat(project)

    send_prompt(
        page, script({"tool_use": {"name": "Read", "input": {"file_path": claude_md}}}, {"text": "Read it."})
    )

    tool = page.locator("details.tool")
    expect(tool.locator(".tool-name")).to_have_text("Read")
    expect(tool.locator(".tool-summary")).to_have_text(claude_md)
    expect(tool.locator(".tool-state")).to_have_text("done")
    expect(tool.locator(".tool-pre").first).not_to_be_visible()
    tool.locator("summary").click()
    expect(tool.locator(".tool-pre").first).to_contain_text('"file_path"')
    expect(tool.locator(".tool-result")).to_contain_text("Use tabs, never spaces.")
    expect(last_reply(page)).to_have_text("Read it.")


def test_the_prompt_box_stays_usable_while_a_run_is_active_and_cancel_stops_it(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)

    send_prompt(page, script(SLOW_TEXT))

    expect(page.locator(".msg-text.is-streaming")).to_be_visible()
    expect(page.locator("[data-role=status]")).to_have_text("Running")
    # While Claude works, what is typed goes into the running turn (issue 20).
    expect(page.locator(PROMPT)).to_be_enabled()
    expect(page.locator(PROMPT)).to_have_attribute(
        "placeholder", "Claude is working — your message goes into the running turn"
    )
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("[data-role=status]")).to_have_text("Cancelled")
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()
    # A cancel is the user's own choice: said as a neutral notice, not an error (issue 21).
    expect(page.locator(".msg-notice")).to_contain_text("Cancelled by the user.")
    expect(page.locator(".msg-error")).to_have_count(0)
    expect(page.locator(".msg-text.is-streaming")).to_have_count(0)
    expect(page.locator(PROMPT)).to_be_enabled()


def test_a_reload_mid_run_shows_every_event_once_and_follows_to_the_end(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    send_prompt(page, script({"text": "a" * 80 + " the end", "pace_ms": 40, "chunk_chars": 2}))
    expect(page.locator(".msg-text.is-streaming")).to_be_visible()
    expect(page).to_have_url(re.compile(r"\?c=\d+$"))

    page.reload()

    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed", timeout=30_000)
    expect(page.locator(".msg-user")).to_have_count(1)
    replies = page.locator(".msg-claude .msg-text")
    expect(replies).to_have_count(1)
    expect(replies).to_have_text("a" * 80 + " the end")


def test_a_dropped_stream_resumes_from_the_last_event(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    dropped: list[str] = []

    def drop_first_stream(route: Any) -> None:
        # The first connection fails outright; EventSource gives up and we reopen it.
        if not dropped:
            dropped.append(route.request.url)
            route.fulfill(status=502, body="bad gateway")
        else:
            route.continue_()

    page.route("**/api/runs/*/events*", drop_first_stream)
    send_prompt(page, script({"text": "Survived the outage."}))

    expect(last_reply(page)).to_have_text("Survived the outage.", timeout=30_000)
    assert dropped
    expect(page.locator(".msg-user")).to_have_count(1)
    expect(page.locator(".msg-claude")).to_have_count(1)


def test_a_stream_cut_mid_run_reconnects_and_shows_nothing_twice(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    connections: list[str] = []

    def cut_then_replay_everything(route: Any) -> None:
        connections.append(route.request.url)
        # Fetched here with no Last-Event-ID: the whole run from event 1.
        blocks = route.fetch(headers={"Accept": "text/event-stream"}).text().split("\n\n")
        if len(connections) == 1:
            # The first connection ends before Claude's text is complete.
            blocks = blocks[: next(i for i, b in enumerate(blocks) if "event: assistant_text" in b)]
        # A reconnect answered from event 1 again: the page must drop what it already has.
        body = "\n\n".join(blocks) + "\n\n"
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=body)

    page.route("**/api/runs/*/events*", cut_then_replay_everything)
    send_prompt(page, script({"text": "Once and only once."}))

    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed", timeout=30_000)
    assert len(connections) == 2
    expect(page.locator(".msg-user")).to_have_count(1)
    expect(page.locator(".run-meta")).to_have_count(1)
    expect(page.locator(".msg-claude")).to_have_count(1)
    expect(last_reply(page)).to_have_text("Once and only once.")


def test_conversations_are_listed_newest_first_and_reopen_from_the_sidebar(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    send_prompt(page, script({"text": "Older reply."}))
    expect(last_reply(page)).to_have_text("Older reply.")

    page.get_by_role("button", name="New conversation").click()
    expect(page.locator(".run")).to_have_count(0)
    send_prompt(page, script({"text": "Newer reply."}))
    expect(last_reply(page)).to_have_text("Newer reply.")

    items = page.locator(".chat-conversation-title")
    expect(items).to_have_count(2)
    expect(items.first).to_contain_text("Newer reply")
    items.last.click()
    expect(last_reply(page)).to_have_text("Older reply.")
    expect(page.locator(".run")).to_have_count(1)
    page.go_back()
    expect(last_reply(page)).to_have_text("Newer reply.")


def test_a_refused_prompt_shows_the_servers_message(open_chat: OpenChat, alice: Any, settings: Any) -> None:
    settings.RUNS_PER_USER = 0
    project = make_project(owner=alice)
    page = open_chat(project)

    send_prompt(page, "hello")

    expect(page.locator("[data-role=composer-error]")).to_be_visible()
    expect(page.locator(".run")).to_have_count(0)
    expect(page.locator(PROMPT)).to_have_value("hello")


def test_the_page_hands_the_script_its_urls(alice: Any, client: Any) -> None:
    project = make_project(owner=alice)
    client.force_login(alice)

    response = client.get(f"/projects/{project.pk}/")

    html = response.content.decode()
    assert f'data-runs-url="/api/projects/{project.pk}/runs"' in html
    assert f'data-conversations-url="/api/projects/{project.pk}/conversations"' in html
    assert 'data-conversation-url="/api/conversations/{id}"' in html
    assert 'data-cancel-url="/api/runs/{id}/cancel"' in html
    assert 'data-submit-answer-url="/api/askuser/submit-answer"' in html
    assert 'data-csrf-cookie="csrftoken"' in html
    assert 'type="module"' in html and "/static/js/chat/main.js" in html
    assert "csrftoken" in response.cookies


def test_static_files_are_served_by_the_app_itself(app_server: Any) -> None:
    import httpx

    for path in ("/static/js/chat/main.js", "/static/css/chat.css", "/static/admin/css/base.css"):
        response = httpx.get(f"{app_server.url}{path}")
        assert response.status_code == 200, path
