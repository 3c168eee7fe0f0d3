"""Structured-output requests (``output_config.format`` a JSON schema): the scripted model's answer.

PromptManager's answering-by-policy agent (``askuser.policy_model``) sends one: the request is
a JSON object in a fenced block of the user message, with the team's instructions, the
question and its options (or a tool call), and the reply must be a ``PolicyReply``. The
scripted model decides as a careful, literal reader of the instructions would:

- ``POLICY_SCRIPT: {...}`` in the instructions: exactly that reply (tests pin a decision);
- "leave questions about A, B to me" (or "…to us", "…to a person"): a question that mentions
  A or B is deferred;
- a question gets the option the instructions name, else its first option; a question with
  no options the instructions' first sentence;
- a tool call is allowed when the instructions say to allow that tool by name (Bash
  included), else it is left to a person.

Any other schema gets the smallest instance of it, so a client's parser has something valid.
"""

from __future__ import annotations

import json
import re
from typing import Any

POLICY_SCRIPT_MARKER = "POLICY_SCRIPT:"
_FENCED_JSON = re.compile(r"```json\n(.*?)\n```", re.S)
_RESERVE = re.compile(r"leave (?:questions|anything) about (.+?) to (?:me|us|a person|a human)", re.I)


def is_structured(body: dict[str, Any]) -> bool:
    output = body.get("output_config") or {}
    return isinstance(output, dict) and (output.get("format") or {}).get("type") == "json_schema"


def _request_payload(body: dict[str, Any]) -> dict[str, Any] | None:
    for message in reversed(body.get("messages") or []):
        content = message.get("content")
        texts = [content] if isinstance(content, str) else [b.get("text", "") for b in content or []]
        for text in texts:
            match = _FENCED_JSON.search(str(text))
            if match:
                try:
                    payload = json.loads(match.group(1))
                except json.JSONDecodeError:
                    return None
                return payload if isinstance(payload, dict) else None
    return None


def _scripted(instructions: str) -> dict[str, Any] | None:
    index = instructions.find(POLICY_SCRIPT_MARKER)
    if index < 0:
        return None
    raw = instructions[index + len(POLICY_SCRIPT_MARKER) :].lstrip()
    reply, _ = json.JSONDecoder().raw_decode(raw)
    return dict(reply)


def _mentions(text: str, word: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.I) is not None


def _reserved_words(instructions: str) -> list[str]:
    words: list[str] = []
    for match in _RESERVE.finditer(instructions):
        words += [w.strip() for w in re.split(r",| or | and ", match.group(1)) if w.strip()]
    return words


def _choose(question: dict[str, Any], instructions: str) -> tuple[dict[str, Any], str]:
    labels = [str(o.get("label", "")) for o in question.get("options") or []]
    named = [label for label in labels if label and _mentions(instructions, label)]
    text = str(question.get("question", ""))
    if not labels:
        first = re.split(r"(?<=[.!?])\s", instructions.strip(), maxsplit=1)[0] or "Use your best judgment."
        return {"question": text, "selected": [], "other": first}, "the instructions say what to do"
    if named:
        chosen = named if question.get("multiSelect") else named[:1]
        return {"question": text, "selected": chosen, "other": ""}, f"the instructions name “{chosen[0]}”"
    return {
        "question": text,
        "selected": labels[:1],
        "other": "",
    }, "no instruction covers it, so Claude's first option"


def _decide_question(payload: dict[str, Any], instructions: str) -> dict[str, Any]:
    questions = payload.get("questions") or []
    asked = " ".join(str(q.get("question", "")) for q in questions)
    for word in _reserved_words(instructions):
        if _mentions(asked, word):
            return {
                "decision": "defer",
                "choices": [],
                "message": "",
                "reasoning": f"The team's instructions leave questions about {word} to a person.",
            }
    choices, reasons = (
        zip(*(_choose(q, instructions) for q in questions), strict=True) if questions else ((), ())
    )
    return {
        "decision": "answer",
        "choices": list(choices),
        "message": "",
        "reasoning": "I answered as the team would: " + "; ".join(reasons) + ".",
    }


def _decide_tool(payload: dict[str, Any], instructions: str) -> dict[str, Any]:
    tool = payload.get("tool_call") or {}
    name = str(tool.get("tool_name", ""))
    allowed = bool(re.search(rf"allow[^.\n]*\b{re.escape(name)}\b", instructions, re.I)) if name else False
    if allowed:
        return {
            "decision": "allow",
            "choices": [],
            "message": "",
            "reasoning": f"The instructions allow {name}.",
        }
    return {
        "decision": "defer",
        "choices": [],
        "message": "",
        "reasoning": f"The instructions do not allow {name or 'this tool'}; a person should decide.",
    }


def _instance(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """The smallest value a JSON schema accepts (first enum value, empty strings and lists)."""
    if "$ref" in schema:
        return _instance(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return _instance(schema["anyOf"][0], defs)
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _instance(v, defs) for k, v in props.items() if k in (schema.get("required") or props)}
    return {"array": [], "string": "", "integer": 0, "number": 0, "boolean": False}.get(str(kind))


def structured_text(body: dict[str, Any]) -> str:
    """The JSON text of the reply to a structured-output request."""
    payload = _request_payload(body)
    if payload is not None and ("questions" in payload or "tool_call" in payload):
        instructions = str(payload.get("team_instructions") or "")
        scripted = _scripted(instructions)
        if scripted is not None:
            return json.dumps(scripted)
        decide = _decide_question if "questions" in payload else _decide_tool
        return json.dumps(decide(payload, instructions))
    schema = ((body.get("output_config") or {}).get("format") or {}).get("schema") or {}
    return json.dumps(_instance(schema, schema.get("$defs") or {}))
