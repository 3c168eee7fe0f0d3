"""A tiny stdio MCP server that the CLI contract tests register in a workspace.

Run as a script (``python contract_mcp_server.py``). Tools, as Claude sees them
(``mcp__contract__<tool>``):

* ``note``: changes nothing but carries no ``readOnlyHint``, so the CLI treats it as a write.
* ``peek``: the same, annotated ``readOnlyHint: true``.
* ``decide``: a permission prompt tool (``--permission-prompt-tool mcp__contract__decide``).
  It appends the arguments the CLI sent, verbatim, as one JSON line to the file named by
  ``CONTRACT_RECORD`` and answers by ``decision`` below, unless the decision table named by
  ``CONTRACT_DECISIONS`` has an entry for the call (see ``table_decision``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations

SERVER_NAME = "contract"
RECORD_ENV_VAR = "CONTRACT_RECORD"
DECISIONS_ENV_VAR = "CONTRACT_DECISIONS"
ALLOW_MARKER = "echo allowed"
BARE_DENY_MARKER = "echo bare-deny"
REWRITE = " && echo rewritten-by-the-prompt-tool"
DENY_MESSAGE = "The contract prompt tool refused this command."


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


def answers_for(questions: list[dict[str, Any]]) -> dict[str, str]:
    """The answers PromptManager would send: {question text: label}, several labels comma-joined."""
    answers: dict[str, str] = {}
    for question in questions:
        labels = [str(option["label"]) for option in question.get("options") or []]
        chosen = labels[:2] if question.get("multiSelect") else labels[1:2]
        answers[str(question["question"])] = ", ".join(chosen)
    return answers


def table_decision(tool_name: str, tool_input: dict[str, Any]) -> dict[str, Any] | None:
    """The decision table's answer: the file named by ``CONTRACT_DECISIONS`` holds a JSON list of
    ``{"tool_name", "contains", "decision"}``; the first entry for this tool whose ``contains``
    occurs in the Bash command (or is empty) answers with its ``decision``, an allow carrying
    the input unchanged as ``updatedInput``."""
    path = os.environ.get(DECISIONS_ENV_VAR)
    if not path:
        return None
    with open(path, encoding="utf-8") as handle:
        table: list[dict[str, Any]] = json.load(handle)
    command = str(tool_input.get("command", ""))
    for entry in table:
        if entry["tool_name"] == tool_name and str(entry.get("contains", "")) in command:
            answer = dict(entry["decision"])
            if answer.get("behavior") == "allow":
                answer.setdefault("updatedInput", tool_input)
            return answer
    return None


def decision(tool_name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """AskUserQuestion: allowed with answers; Bash: allowed when the command holds ``ALLOW_MARKER``,
    denied without a message when it holds ``BARE_DENY_MARKER``, else denied with ``DENY_MESSAGE``."""
    if tool_name == "AskUserQuestion":
        answers = answers_for(list(tool_input.get("questions") or []))
        return {"behavior": "allow", "updatedInput": {**tool_input, "answers": answers}}
    command = str(tool_input.get("command", ""))
    if ALLOW_MARKER in command:
        # Rewritten, so a test can tell that updatedInput (not the model's input) is what runs.
        return {"behavior": "allow", "updatedInput": {**tool_input, "command": command + REWRITE}}
    if BARE_DENY_MARKER in command:
        return {"behavior": "deny"}
    return {"behavior": "deny", "message": DENY_MESSAGE}


async def note(text: str) -> CallToolResult:
    """Take a note (a tool without readOnlyHint)."""
    return _text(f"noted: {text}")


async def peek(text: str) -> CallToolResult:
    """Look at something (a tool annotated readOnlyHint: true)."""
    return _text(f"peeked: {text}")


async def decide(
    tool_name: str, input: dict[str, Any], ctx: Context, tool_use_id: str | None = None
) -> CallToolResult:
    """Decide whether a tool call may run (the CLI's permission prompt tool)."""
    # The raw arguments, so a field the CLI adds (or drops) shows up in the record.
    params = ctx.request_context.params or {}
    record = os.environ.get(RECORD_ENV_VAR)
    if record:
        with open(record, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(params.get("arguments")) + "\n")
    answer = table_decision(tool_name, input) or decision(tool_name, input)
    return _text(json.dumps(answer))


def build_server() -> MCPServer[object]:
    server: MCPServer[object] = MCPServer(SERVER_NAME, version="0.1.0", log_level="WARNING")
    server.add_tool(note, name="note", structured_output=False)
    server.add_tool(
        peek, name="peek", annotations=ToolAnnotations(read_only_hint=True), structured_output=False
    )
    server.add_tool(decide, name="decide", structured_output=False)
    return server


if __name__ == "__main__":
    build_server().run()
