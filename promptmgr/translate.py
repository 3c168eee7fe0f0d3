"""Translate Claude Code's stream-json lines into the app's named SSE events.

Both engines produce these events (the SDK engine builds the same dicts from SDK
messages), so the browser needs no engine-specific code. Translation is cheap and
synchronous; the one costly step, rendering an ``assistant_text``'s Markdown into its
``html``, is left to the runner, which does it off the event loop (see ``markdown``).
"""

from __future__ import annotations

import json
from typing import Any

TOOL_RESULT_MAX_CHARS = 20_000
Translated = list[tuple[str, dict[str, Any]]]


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit} more characters not shown]"


def tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type', 'content')}]")
        return "\n".join(parts)
    return "" if content is None else json.dumps(content)


def _session(line: dict[str, Any]) -> Translated:
    servers = [
        {"name": s.get("name"), "status": s.get("status")}
        for s in line.get("mcp_servers") or []
        if isinstance(s, dict)
    ]
    return [
        (
            "session",
            {
                "session_id": line.get("session_id"),
                "model": line.get("model"),
                "permission_mode": line.get("permissionMode"),
                "tools": line.get("tools") or [],
                "mcp_servers": servers,
            },
        )
    ]


def _stream_event(line: dict[str, Any]) -> Translated:
    event = line.get("event") or {}
    if event.get("type") != "content_block_delta":
        return []
    delta = event.get("delta") or {}
    if delta.get("type") != "text_delta":
        return []
    return [
        (
            "text_delta",
            {
                "text": delta.get("text", ""),
                "index": event.get("index", 0),
                "parent_tool_use_id": line.get("parent_tool_use_id"),
            },
        )
    ]


def _assistant(line: dict[str, Any]) -> Translated:
    message = line.get("message") or {}
    parent = line.get("parent_tool_use_id")
    out: Translated = []
    for block in message.get("content") or []:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            text = str(block["text"])
            out.append(
                (
                    "assistant_text",
                    {"text": text, "parent_tool_use_id": parent},
                )
            )
        elif kind == "tool_use":
            out.append(
                (
                    "tool_use",
                    {
                        "id": block.get("id"),
                        "name": block.get("name"),
                        "input": block.get("input") or {},
                        "parent_tool_use_id": parent,
                    },
                )
            )
    return out


def _user(line: dict[str, Any]) -> Translated:
    message = line.get("message") or {}
    content = message.get("content")
    if not isinstance(content, list):
        return []
    out: Translated = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            out.append(
                (
                    "tool_result",
                    {
                        "tool_use_id": block.get("tool_use_id"),
                        "content": _clip(tool_result_text(block.get("content")), TOOL_RESULT_MAX_CHARS),
                        "is_error": bool(block.get("is_error")),
                    },
                )
            )
    return out


def result_event(line: dict[str, Any]) -> dict[str, Any]:
    return {
        "subtype": line.get("subtype"),
        "is_error": bool(line.get("is_error")),
        "cost_usd": line.get("total_cost_usd"),
        "duration_ms": line.get("duration_ms"),
        "duration_api_ms": line.get("duration_api_ms"),
        "num_turns": line.get("num_turns"),
        "usage": line.get("usage") or {},
        "result": line.get("result"),
        "permission_denials": line.get("permission_denials") or [],
    }


def _tool_progress(line: dict[str, Any]) -> Translated:
    keep = ("tool_use_id", "tool_name", "elapsed_time_seconds", "parent_tool_use_id")
    return [("tool_progress", {k: line.get(k) for k in keep if k in line})]


class MalformedLine(ValueError):
    """A JSON line whose shape is not stream-json (a block that is not an object, …)."""


def translate(line: dict[str, Any]) -> Translated:
    """The events one stream-json line becomes (often none); MalformedLine for bad shapes."""
    try:
        return _translate(line)
    except (AttributeError, TypeError, KeyError) as exc:
        raise MalformedLine(str(exc)) from exc


def _translate(line: dict[str, Any]) -> Translated:
    kind = line.get("type")
    if kind == "system":
        return _session(line) if line.get("subtype") == "init" else []
    if kind == "stream_event":
        return _stream_event(line)
    if kind == "assistant":
        return _assistant(line)
    if kind == "user":
        return _user(line)
    if kind == "result":
        return [("result", result_event(line))]
    if kind == "tool_progress":
        return _tool_progress(line)
    return []
