"""Helpers for the engine tests: start a run, answer its card, read what the model received."""

from __future__ import annotations

from typing import Any

from tests.helpers import ASK_USER_TOOL

ASK_USER_QUESTION = "AskUserQuestion"


def option_list(*labels: str) -> list[dict[str, str]]:
    return [{"label": label, "description": f"about {label}"} for label in labels]


def sdk_question(question: str, header: str, labels: list[str], multi: bool = False) -> dict[str, Any]:
    return {"question": question, "header": header, "options": option_list(*labels), "multiSelect": multi}


def ask_user_question(*questions: dict[str, Any]) -> dict[str, Any]:
    """A scripted step calling the built-in AskUserQuestion (the SDK engine's way to ask)."""
    return {"tool_use": {"name": ASK_USER_QUESTION, "input": {"questions": list(questions)}}}


def mcp_ask_user(question: dict[str, Any]) -> dict[str, Any]:
    """A scripted step calling the ask-user MCP tool (the CLI engine's way to ask)."""
    return {"tool_use": {"name": ASK_USER_TOOL, "input": question}}
