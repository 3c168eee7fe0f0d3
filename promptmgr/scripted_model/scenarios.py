"""Turn a Messages API request into the scripted reply for that step.

A prompt picks its script in one of two ways:

* ``SCRIPT: [...]`` anywhere in the prompt: a JSON list of steps, one per model turn.
  A step is an object with any of ``text`` (str), ``repeat`` (int, repeats the text),
  ``tool_use`` ({"name", "input"}), ``quote_tool_results`` (bool: append the tool
  results received since the prompt), ``quote_earlier_prompts`` (bool: append the
  conversation's earlier prompts), ``quote_user_messages`` (bool: append the messages the
  user sent while the turn ran), ``pace_ms`` and ``chunk_chars`` (streaming pace).
* otherwise a named demo scenario, chosen by keywords, so the offline demo shows the
  whole flow to a new user.

The step is derived from the conversation itself (how many assistant turns follow the
current prompt), so the server keeps no state and resumed sessions work.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from core.tool_names import ASK_USER_QUESTION, MCP_ASK_USER

SCRIPT_MARKER = "SCRIPT:"

ASK_USER_TOOL = MCP_ASK_USER
ASK_USER_QUESTION_TOOL = ASK_USER_QUESTION


@dataclass
class ToolUse:
    name: str
    input: dict[str, Any]


@dataclass
class Reply:
    """One assistant turn: streamed text, then optionally one tool call."""

    text: str = ""
    tool_use: ToolUse | None = None
    pace_ms: float | None = None
    chunk_chars: int | None = None


@dataclass
class Conversation:
    """What the scripted model needs to know about the request's messages."""

    prompt: str
    earlier_prompts: list[str] = field(default_factory=list)
    tool_names: list[str] = field(default_factory=list)
    turns_since_prompt: int = 0
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    # What the user sent while the turn ran, as the CLI hands it to the model (``interjections``).
    user_messages: list[str] = field(default_factory=list)


_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)


def _block_text(content: Any) -> str:
    """The typed text of a message, without the CLI's injected system reminders."""
    if isinstance(content, str):
        return _REMINDER.sub("", content).strip()
    parts: list[str] = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return _REMINDER.sub("", "\n".join(parts)).strip()


def _tool_result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return _block_text(content)


def _is_prompt(message: dict[str, Any]) -> bool:
    """A user message that carries typed text rather than only tool results."""
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    types = {b.get("type") for b in content or [] if isinstance(b, dict)}
    return "tool_result" not in types and "text" in types


def read_conversation(body: dict[str, Any]) -> Conversation:
    messages: list[dict[str, Any]] = list(body.get("messages") or [])
    prompt_index = max((i for i, m in enumerate(messages) if _is_prompt(m)), default=-1)
    prompt = _block_text(messages[prompt_index].get("content")) if prompt_index >= 0 else ""
    after = messages[prompt_index + 1 :]
    results: list[dict[str, Any]] = []
    for message in after:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results.append(
                        {
                            "text": _tool_result_text(block),
                            "is_error": bool(block.get("is_error", False)),
                        }
                    )
    tools = [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)]
    earlier = [_block_text(m.get("content")) for m in messages[: max(prompt_index, 0)] if _is_prompt(m)]
    return Conversation(
        prompt=prompt,
        earlier_prompts=earlier,
        tool_names=tools,
        turns_since_prompt=sum(1 for m in after if m.get("role") == "assistant"),
        user_messages=interjections(after),
        tool_results=results,
    )


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, str):
        return system
    return "\n".join(str(b.get("text", "")) for b in system or [] if isinstance(b, dict))


# How the CLI hands the model a user message that arrived on its stream-json input while a
# turn ran: a system message that starts so, inside the running turn.
MID_TURN_PREFACE = "The user sent a new message while you were working:\n"
MID_TURN_CLOSING = "\n\nThis is how Claude Code surfaces"


def interjections(messages: list[dict[str, Any]]) -> list[str]:
    """The texts of the user messages the CLI slipped into the running turn."""
    found = []
    for message in messages:
        if message.get("role") not in ("system", "user"):
            continue
        text = _block_text(message.get("content"))
        start = text.find(MID_TURN_PREFACE)
        if start < 0:
            continue
        body = text[start + len(MID_TURN_PREFACE) :]
        found.append(body.split(MID_TURN_CLOSING, 1)[0].strip())
    return found


def quote_user_messages(messages: list[str]) -> str:
    return "User messages received: " + json.dumps(messages, ensure_ascii=False)


def parse_script(prompt: str) -> list[dict[str, Any]] | None:
    """The JSON list after ``SCRIPT:``, or None when the prompt has no script."""
    index = prompt.find(SCRIPT_MARKER)
    if index < 0:
        return None
    decoder = json.JSONDecoder()
    raw = prompt[index + len(SCRIPT_MARKER) :].lstrip()
    try:
        steps, _ = decoder.raw_decode(raw)
    except json.JSONDecodeError as exc:
        return [{"text": f"Scripted model: the SCRIPT is not valid JSON ({exc})."}]
    if not isinstance(steps, list):
        return [{"text": "Scripted model: the SCRIPT must be a JSON list of steps."}]
    return [s if isinstance(s, dict) else {"text": str(s)} for s in steps]


def quote_results(results: list[dict[str, Any]]) -> str:
    return "Tool results received: " + json.dumps(results, ensure_ascii=False)


def _step_reply(step: dict[str, Any], conversation: Conversation) -> Reply:
    text = str(step.get("text", ""))
    text = text * int(step.get("repeat", 1))
    if step.get("quote_earlier_prompts"):
        # Proves a resumed session: the model saw the conversation's earlier prompts.
        text = (text + "\n" if text else "") + "Earlier prompts: " + json.dumps(conversation.earlier_prompts)
    if step.get("quote_user_messages"):
        text = (text + "\n" if text else "") + quote_user_messages(conversation.user_messages)
    if step.get("quote_tool_results"):
        text = (text + "\n" if text else "") + quote_results(conversation.tool_results)
    if step.get("acknowledge_answer"):
        received = "; ".join(r["text"] for r in conversation.tool_results) or "nothing"
        text += (
            f"Thanks! The answer reached me in the same turn: “{received}”.\n\n"
            "With the real Claude, work would now continue from your decision."
        )
    tool = step.get("tool_use")
    tool_use = ToolUse(str(tool["name"]), dict(tool.get("input") or {})) if tool else None
    pace = step.get("pace_ms")
    chunk = step.get("chunk_chars")
    return Reply(
        text=text,
        tool_use=tool_use,
        pace_ms=float(pace) if pace is not None else None,
        chunk_chars=int(chunk) if chunk is not None else None,
    )


DEMO_QUESTION = {
    "question": "Which approach should I take for this demo task?",
    "header": "Approach",
    "options": [
        {"label": "Keep it simple", "description": "Smallest change that works."},
        {"label": "Make it robust", "description": "More code, handles edge cases."},
    ],
    "multiSelect": False,
}

DEMO_FORM = [
    DEMO_QUESTION,
    {
        "question": "Which checks should run before I finish?",
        "header": "Checks",
        "options": [
            {"label": "Lint", "description": "Style and obvious mistakes."},
            {"label": "Types", "description": "The type checker."},
            {"label": "Tests", "description": "The test suite."},
        ],
        "multiSelect": True,
    },
]

# Harmless, and asked about in every mode but bypass: the CLI allows file commands in the
# workspace by itself under acceptEdits (mkdir, a redirect), but never runs a program's code.
DEMO_COMMAND = "python3 -c \"print('approved: 6 x 7 =', 6 * 7)\""
DEMO_FILE = "demo/greeting.md"


@dataclass(frozen=True)
class DemoTrigger:
    """A word that makes the offline demo show one part of the app; the chat page lists them."""

    word: str
    example: str
    what: str
    needs_ask_user: bool


DEMO_TRIGGERS = (
    DemoTrigger("ask", "Please ask me which approach to take.", "Claude asks you a question on a card", True),
    DemoTrigger("form", "Show me a form with two questions.", "a form of several questions at once", True),
    DemoTrigger("run", "Run a command in the workspace.", "Claude asks your approval to run a command", True),
    DemoTrigger(
        "edit", "Edit a file in the workspace.", "Claude writes a file, then edits it: see the diff", False
    ),
)
_TRIGGER_WORDS = {
    "form": r"\bforms?\b",
    "run": r"\b(run|command)\b",
    "edit": r"\b(edit|change|diff)\b",
    "ask": r"\b(ask|question|choose|decide)\b",
}
_WORKING_DIRECTORY = re.compile(r"Working directory: (\S+)")


def demo_trigger(prompt: str) -> str | None:
    """The trigger word a prompt contains, tried in the order of ``_TRIGGER_WORDS``."""
    for word, pattern in _TRIGGER_WORDS.items():
        if re.search(pattern, prompt, re.I):
            return word
    return None


def _welcome_text(conversation: Conversation, asks: bool) -> str:
    lines = [
        "This is the **offline demo model** answering (no `ANTHROPIC_API_KEY` is set).",
        f"You wrote: {conversation.prompt.strip()[:500]}",
        "Try a prompt with one of these words:",
    ]
    for trigger in DEMO_TRIGGERS:
        off = " (off: questions are off for this project)" if trigger.needs_ask_user and not asks else ""
        lines.append(f"- *{trigger.word}*: {trigger.what}{off}")
    return "\n\n".join(lines[:3]) + "\n\n" + "\n".join(lines[3:])


def _demo_script(conversation: Conversation, system: str) -> list[dict[str, Any]]:
    """What the offline demo model does with a free-form prompt."""
    has_mcp_ask = ASK_USER_TOOL in conversation.tool_names
    has_form = ASK_USER_QUESTION_TOOL in conversation.tool_names
    # Both engines offer one of the two ask tools exactly when ask-user is on; with it on,
    # tool calls that need approval reach a card as well.
    asks = has_mcp_ask or has_form
    trigger = demo_trigger(conversation.prompt)
    if trigger in {"ask", "form", "run"} and not asks:
        return [
            {
                "text": (
                    "Questions and approvals are **off** for this project, so I cannot ask you "
                    "anything or wait for your approval. Turn them on in the project's Settings "
                    "(“Let Claude ask questions”) and try again."
                )
            }
        ]
    if trigger == "ask":
        if has_mcp_ask:
            tool = {"name": ASK_USER_TOOL, "input": DEMO_QUESTION}
        else:
            tool = {"name": ASK_USER_QUESTION_TOOL, "input": {"questions": [DEMO_QUESTION]}}
        return [
            {"text": "I need a decision from you before I go on.", "tool_use": tool},
            {"acknowledge_answer": True},
        ]
    if trigger == "form" and has_form:
        return [
            {
                "text": "Two decisions before I start; answer both on one card.",
                "tool_use": {"name": ASK_USER_QUESTION_TOOL, "input": {"questions": DEMO_FORM}},
            },
            {"acknowledge_answer": True},
        ]
    if trigger == "form":
        return [{"text": "This engine offers no multi-question form right now; try *ask* instead."}]
    if trigger == "run":
        return [
            {
                "text": "I'd like to run a command in the workspace. It needs your approval.",
                "tool_use": {
                    "name": "Bash",
                    "input": {
                        "command": DEMO_COMMAND,
                        "description": "Print a line with Python",
                    },
                },
            },
            {
                "text": "Here is what happened: the tool answered, and the card shows your decision.",
                "quote_tool_results": True,
            },
        ]
    if trigger == "edit":
        found = _WORKING_DIRECTORY.search(system)
        path = f"{found.group(1).rstrip('/')}/{DEMO_FILE}" if found else DEMO_FILE
        return [
            {
                "text": f"First I create `{DEMO_FILE}`.",
                "tool_use": {
                    "name": "Write",
                    "input": {"file_path": path, "content": "# Hello\n\nA first draft.\n"},
                },
            },
            {
                "text": "Now I change one line; open the Edit call below to see the diff.",
                "tool_use": {
                    "name": "Edit",
                    "input": {
                        "file_path": path,
                        "old_string": "A first draft.",
                        "new_string": "A second, better draft.",
                    },
                },
            },
            {"text": "Done: the file was written, then edited."},
        ]
    return [{"text": _welcome_text(conversation, asks)}]


def next_reply(body: dict[str, Any]) -> Reply:
    """The reply for this request: the step of the script the conversation has reached."""
    conversation = read_conversation(body)
    steps = parse_script(conversation.prompt) or _demo_script(conversation, _system_text(body))
    if conversation.turns_since_prompt >= len(steps):
        # A script that ran out ends the turn quietly instead of looping on tools.
        return Reply(text="Done.")
    return _step_reply(steps[conversation.turns_since_prompt], conversation)
