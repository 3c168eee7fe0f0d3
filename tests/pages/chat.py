"""Plain helpers for driving the chat page in tests."""

from __future__ import annotations

import mimetypes
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

ASK = "mcp__ask-user__ask_user"
QUOTE = {"quote_tool_results": True}
PROMPT = "#chat-prompt"

OpenChat = Callable[[Any], Any]


def serve_static(target: Any) -> None:
    """Serve /static/ to a Playwright page or context from the app's static dirs.

    Tests run with DEBUG off, where the app does not serve static files itself (in
    production the reverse proxy does).
    """
    from django.conf import settings
    from django.contrib.staticfiles import finders

    prefix = str(settings.STATIC_URL)

    def serve(route: Any) -> None:
        name = unquote(urlparse(route.request.url).path)[len(prefix) :]
        found = finders.find(name)
        if not found:
            route.fulfill(status=404, body="not found")
            return
        path = Path(str(found))
        content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        route.fulfill(status=200, body=path.read_bytes(), headers={"Content-Type": content_type})

    target.route(f"**{prefix}**", serve)


def ask(
    question: str, options: list[str] | None = None, *, multi: bool = False, header: str = ""
) -> dict[str, Any]:
    """A scripted step: Claude calls the ask-user MCP tool."""
    tool_input: dict[str, Any] = {"question": question, "multiSelect": multi}
    if options is not None:
        tool_input["options"] = [{"label": o, "description": f"about {o}"} for o in options]
    if header:
        tool_input["header"] = header
    return {"tool_use": {"name": ASK, "input": tool_input}}


def send_prompt(page: Any, text: str) -> None:
    page.fill(PROMPT, text)
    page.press(PROMPT, "Enter")


def last_reply(page: Any) -> Any:
    """Claude's last complete (Markdown-rendered) text block."""
    return page.locator(".msg-claude .msg-text.markdown").last
