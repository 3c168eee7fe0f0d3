"""The answering agent's call to the model: what it is shown, and the decision it returns.

It calls the Anthropic Messages API with the ``anthropic`` SDK, with the same key and base
URL as Claude (the scripted model in tests and the offline demo), and asks for structured
output (``PolicyReply``, a JSON schema the SDK sends as ``output_config.format``). It is
shown the project's context, the team's instructions, the conversation so far and the
question with its options (or the tool call waiting for approval), and returns a decision
with one paragraph of reasoning.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    import anthropic

MAX_TOKENS = 1024
# The conversation is cut to its most recent part past this many characters.
CONVERSATION_BUDGET = 20_000
DEMO_KEY = "offline-demo-model"

SYSTEM = """\
You answer for a software team when Claude Code, working on the team's project, needs a \
decision from them. Decide as the team would, by their instructions and the project's context.

Rules:
- Leave it to a person (decision "defer") when it concerns credentials, secrets or access \
(passwords, tokens, keys), destructive or irreversible actions (deleting, dropping, \
overwriting, force-pushing, deploying), or anything the team's instructions reserve for a \
person. When in doubt, defer.
- For a question, decide "answer" and choose, for every question, the option labels that \
fit ("selected"; one label unless the question is multi-select), or type a short answer \
("other") when no option fits or there are none.
- For a tool call, decide "allow", "deny" (say why in "message") or "defer". Never allow \
Bash commands unless the instructions explicitly allow them.
- "reasoning" is one paragraph saying why, in plain words, for the team to read.
The request is the JSON object in the user message.
"""


class PolicyChoice(BaseModel):
    question: str
    selected: list[str] = Field(default_factory=list)
    other: str = ""


class PolicyReply(BaseModel):
    """The structured output the agent asks the model for."""

    decision: Literal["answer", "allow", "deny", "defer"]
    choices: list[PolicyChoice] = Field(default_factory=list)
    message: str = ""
    reasoning: str


@dataclass(frozen=True)
class AgentReply:
    reply: PolicyReply
    model: str
    usage: dict[str, int]


class AgentError(Exception):
    """The model could not be reached, or gave no usable decision."""


def clip_conversation(turns: list[dict[str, str]], budget: int = CONVERSATION_BUDGET) -> list[dict[str, str]]:
    """The most recent turns that fit the budget, oldest first."""
    kept: list[dict[str, str]] = []
    used = 0
    for turn in reversed(turns):
        used += len(turn["text"])
        if used > budget and kept:
            break
        kept.append(turn)
    return kept[::-1]


def request_text(
    *, project_context: str, instructions: str, conversation: list[dict[str, str]], subject: dict[str, Any]
) -> str:
    """The user message: a short lead-in and the request as one JSON object."""
    payload = {
        "team_instructions": instructions,
        "project_context": project_context,
        "conversation_so_far": clip_conversation(conversation),
        **subject,
    }
    return (
        "Decide on this, following the rules.\n\n```json\n"
        + json.dumps(payload, ensure_ascii=False)
        + "\n```"
    )


async def _sdk() -> Any:
    """The ``anthropic`` SDK, imported on first use: it is 60 MiB of a worker's memory that
    only a project answering by policy needs (bench/scale.py, idle RSS). Imported off the
    event loop, which the second or so of the import would otherwise hold up."""
    return await asyncio.to_thread(importlib.import_module, "anthropic")


def _client(sdk: Any) -> anthropic.AsyncAnthropic:
    key = settings.ANTHROPIC_API_KEY or (DEMO_KEY if settings.DEMO_MODEL else "")
    return sdk.AsyncAnthropic(  # type: ignore[no-any-return]
        api_key=key,
        base_url=settings.ANTHROPIC_BASE_URL,
        timeout=float(settings.ANSWER_POLICY_TIMEOUT),
        max_retries=1,
    )


async def ask_model(*, model: str, text: str) -> AgentReply:
    """One structured-output request; ``AgentError`` when there is no usable decision."""
    sdk = await _sdk()
    client = _client(sdk)
    try:
        message = await client.messages.parse(
            model=model,
            max_tokens=MAX_TOKENS,
            system=SYSTEM,
            messages=[{"role": "user", "content": text}],
            output_format=PolicyReply,
        )
    except (sdk.APIError, ValueError) as exc:
        raise AgentError(str(exc)) from exc
    finally:
        await client.close()
    reply = message.parsed_output
    if reply is None:
        raise AgentError("the model's reply held no decision")
    usage = {
        "input_tokens": int(message.usage.input_tokens),
        "output_tokens": int(message.usage.output_tokens),
    }
    return AgentReply(reply=reply, model=str(message.model), usage=usage)
