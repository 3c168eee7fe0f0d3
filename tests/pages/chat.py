"""Plain helpers for driving the chat page in tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ASK = "mcp__ask-user__ask_user"
QUOTE = {"quote_tool_results": True}
PROMPT = "#chat-prompt"

OpenChat = Callable[[Any], Any]


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
