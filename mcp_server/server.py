"""The ``ask-user`` MCP server and its two tools (``mcp__ask-user__<tool>`` to Claude).

``ask_user`` below is the plain, testable function; ``ask_user_tool`` is the thin wrapper whose
signature is the tool's input schema and whose docstring is the description the model reads.
``approve_tool`` wraps ``approvals.approve``, the permission prompt tool the CLI calls itself.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast, get_args

from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError, WithJsonSchema

from core.questions import Option, QuestionSpec
from core.tool_names import APPROVE_TOOL, ASK_TOOL, MCP_SERVER_NAME

from . import answers
from .approvals import approve
from .config import CONFIG_ENV_VAR, ConfigError, current_config
from .errors import (
    QuestionCancelled,
    QuestionExpired,
    QuestionSuperseded,
    RelayUnavailable,
    RequestRejected,
    RunFinished,
)
from .relay import relay_question, wait_for_answer
from .relay_http import ClientFactory, shared_client
from .stdio import pipe_stdio, pipes_apart

TOOL_TITLE = "Ask the user"
APPROVE_TOOL_TITLE = "Approve a tool call"
LOG_LEVEL_ENV_VAR = "ASK_USER_LOG_LEVEL"
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

INSTRUCTIONS = (
    "The person who started this session is watching it in a browser but cannot reply to your "
    "messages until your turn ends. When you need their decision, call ask_user instead of ending "
    "your turn with a question or guessing."
)

# Written by hand so the model sees the same flat shape as the functional spec (no $defs/anyOf).
OPTIONS_SCHEMA = {
    "type": "array",
    "description": (
        "Choices to offer, usually 2-4. Leave out for a free-text answer. The user can always write "
        "their own answer instead."
    ),
    "items": {
        "type": "object",
        "required": ["label"],
        "properties": {
            "label": {"type": "string", "description": "Short label for the option (1-5 words)"},
            "description": {
                "type": "string",
                "description": "Longer explanation of what choosing this option means",
            },
        },
    },
}
HEADER_SCHEMA = {
    "type": "string",
    "description": 'Very short topic label shown as a chip above the question, e.g. "Database"',
}


@dataclass(frozen=True)
class OptionArgument:
    """An option as the model sent it: checked (``answers.argument_problem``) before it is relayed."""

    label: str
    description: str | None = None


def _validation_problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"an invalid {'.'.join(str(p) for p in first['loc'])} ({first['msg']})"


def _text_result(text: str, *, is_error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)


async def ask_user(
    config_path_env: str | None,
    question: str,
    options: Sequence[OptionArgument] | None = None,
    multi_select: bool = False,
    header: str | None = None,
    *,
    client_factory: ClientFactory = shared_client,
) -> CallToolResult:
    """Relay one question to PromptManager and wait for the answer.

    ``config_path_env`` is the value of ``ASK_USER_CONFIG`` (None when unset). Every outcome is a
    text result: the formatted answer, or ``is_error`` with a sentence telling Claude what to do.
    """
    try:
        config = await current_config(config_path_env)
    except ConfigError as exc:
        return _text_result(answers.not_configured(str(exc)), is_error=True)

    labels = [o.label.strip() for o in options or ()]
    problem = answers.argument_problem(question, labels)
    if problem is not None:
        return _text_result(answers.invalid_arguments(problem), is_error=True)
    try:
        payload = QuestionSpec(
            question=question.strip(),
            header=(header or "").strip(),
            options=[
                Option(label=label, description=o.description or "")
                for label, o in zip(labels, options or (), strict=True)
            ],
            multiSelect=multi_select and bool(labels),
        )
    except ValidationError as exc:
        return _text_result(answers.invalid_arguments(_validation_problem(exc)), is_error=True)

    async with client_factory() as client:
        try:
            relayed = await relay_question(client, config, payload)
            answer = await wait_for_answer(client, config, relayed)
        except QuestionExpired as exc:
            return _text_result(answers.timed_out(exc.timeout), is_error=True)
        except QuestionSuperseded:
            return _text_result(answers.SUPERSEDED, is_error=True)
        except QuestionCancelled:
            return _text_result(answers.CANCELLED, is_error=True)
        except RunFinished:
            return _text_result(answers.RUN_ENDED, is_error=True)
        except RequestRejected as exc:
            return _text_result(answers.rejected(exc.detail), is_error=True)
        except RelayUnavailable as exc:
            return _text_result(answers.unreachable(exc.reason), is_error=True)
    return _text_result(answers.format_answer(answer))


async def ask_user_tool(
    question: Annotated[str, Field(description="The question to ask the user, as one clear sentence")],
    options: Annotated[list[OptionArgument] | None, WithJsonSchema(OPTIONS_SCHEMA)] = None,
    # camelCase because the parameter name is the schema name Claude sends (functional spec).
    multiSelect: Annotated[bool, Field(description="Let the user pick more than one option")] = False,
    header: Annotated[str | None, WithJsonSchema(HEADER_SCHEMA)] = None,
) -> CallToolResult:
    """Ask the user a question and wait for their answer.

    Use this when you need clarification, a choice between options, or confirmation before
    proceeding, instead of guessing or ending your turn with a question. The question appears in
    the user's browser and this call waits until they answer (up to several minutes).

    Ask one question per call. Give `options` when the possible answers are known (the user can
    still write something else); set `multiSelect` when several options may apply; leave `options`
    out for a free-text answer.

    The result reads "User selected: ..." or "User answered: ...", sometimes followed by
    "Notes: ...". If the result is an error (no answer in time, the run is ending, PromptManager
    unreachable), do not ask the same question again: carry on with your best judgment and say
    which assumption you made.
    """
    return await ask_user(os.environ.get(CONFIG_ENV_VAR), question, options, multiSelect, header)


async def approve_tool(
    tool_name: Annotated[str, Field(description="The tool Claude wants to call")],
    # The names are the ones the CLI sends; `input` is its argument, not the builtin.
    input: Annotated[dict[str, Any], Field(description="The arguments of that tool call")],
    tool_use_id: Annotated[str, Field(description="The id of that tool call")] = "",
) -> CallToolResult:
    """PromptManager's permission prompt tool. Claude Code calls it by itself whenever a tool call
    needs permission; do not call it yourself.

    A person decides in the browser whether the call may run. The result is the permission
    decision as JSON text: {"behavior": "allow", "updatedInput": {...}} or
    {"behavior": "deny", "message": "..."}. To ask the user a question, use ask_user instead.
    """
    return await approve(os.environ.get(CONFIG_ENV_VAR), tool_name, input, tool_use_id)


def _log_level() -> LogLevel:
    # Quiet by default: Claude Code keeps MCP stderr, and httpx logs every poll at INFO.
    level = os.environ.get(LOG_LEVEL_ENV_VAR, "WARNING").upper()
    return cast(LogLevel, level) if level in get_args(LogLevel) else "WARNING"


def _add_tool(server: MCPServer[object], tool: Any, *, name: str, title: str, read_only: bool) -> None:
    """Register a tool whose docstring is the description the model reads; text results only."""
    server.add_tool(
        tool,
        name=name,
        title=title,
        description=inspect.cleandoc(tool.__doc__ or ""),
        annotations=ToolAnnotations(
            title=title,
            read_only_hint=read_only,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
        structured_output=False,
    )


class AskUserServer(MCPServer[object]):
    """The SDK's server, whose stdio is read and written by the event loop when it can be
    (``stdio.pipe_stdio``: the SDK's default goes through a worker thread for every line)."""

    async def run_stdio_async(self) -> None:
        if not pipes_apart():
            await super().run_stdio_async()
            return
        async with pipe_stdio() as (lines, out), stdio_server(lines, out) as (read_stream, write_stream):  # type: ignore[arg-type]
            await self._lowlevel_server.run(
                read_stream, write_stream, self._lowlevel_server.create_initialization_options()
            )


def build_server() -> MCPServer[object]:
    server: MCPServer[object] = AskUserServer(
        MCP_SERVER_NAME,
        title="PromptManager ask-user",
        instructions=INSTRUCTIONS,
        version="0.1.0",
        log_level=_log_level(),
    )
    # Read-only so plan mode allows it; it only asks, and changes nothing in the workspace.
    _add_tool(server, ask_user_tool, name=ASK_TOOL, title=TOOL_TITLE, read_only=True)
    # Not read-only: its allow lets another tool change the workspace. The CLI started with
    # --permission-prompt-tool hides it from the model (tests/mcp_server/test_approve_with_cli.py).
    _add_tool(server, approve_tool, name=APPROVE_TOOL, title=APPROVE_TOOL_TITLE, read_only=False)
    return server
