"""The chat page's prompt box (static/js/chat/main.js): Enter sends, Shift+Enter starts a new line."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from promptmgr.models import Run
from tests.helpers import make_project, script
from tests.pages.chat import PROMPT, OpenChat, last_reply

pytestmark = pytest.mark.browser


def test_shift_enter_inserts_a_newline_and_enter_sends_the_whole_prompt(
    open_chat: OpenChat, alice: Any
) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    posts: list[str] = []
    page.on(
        "request", lambda r: posts.append(r.url) if r.method == "POST" and r.url.endswith("/runs") else None
    )
    box = page.locator(PROMPT)
    second_line = script({"text": "Got both lines."})

    box.fill("First line")
    box.press("Shift+Enter")
    page.keyboard.insert_text(second_line)

    expect(box).to_have_value(f"First line\n{second_line}")
    expect(page.locator(".run")).to_have_count(0)
    assert posts == []

    box.press("Enter")

    expect(last_reply(page)).to_have_text("Got both lines.")
    expect(box).to_have_value("")
    assert len(posts) == 1
    assert Run.objects.get(conversation__project=project).prompt == f"First line\n{second_line}"
