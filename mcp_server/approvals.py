"""``approve``: the permission prompt tool the CLI calls (``--permission-prompt-tool mcp__ask-user__approve``).

The CLI calls it with ``{tool_name, input, tool_use_id}`` for every tool call that needs
permission and reads back text content holding a permission result:
``{"behavior": "allow", "updatedInput": {…}, "updatedPermissions": […]}`` or
``{"behavior": "deny", "message": "…"}``. A person decides in the browser; PromptManager's
decision is handed to the CLI verbatim. Every other outcome is a deny with a sentence from
``answers``, because a deny without a message, or no result at all, is refused by the CLI.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from mcp_types import CallToolResult, TextContent

from . import answers
from .config import ConfigError, current_config
from .errors import (
    DecisionMalformed,
    DecisionTimedOut,
    RelayUnavailable,
    RequestRejected,
    RunFinished,
)
from .relay import relay_permission, wait_for_decision
from .relay_http import ClientFactory, shared_client

logger = logging.getLogger(__name__)


def result_problem(result: Mapping[str, Any]) -> str | None:
    """Why ``result`` is not a permission result the CLI accepts, or None when it is."""
    behavior = result.get("behavior")
    if behavior == "allow":
        if not isinstance(result.get("updatedInput"), dict):
            return "an allow without an updatedInput object"
        if "updatedPermissions" in result and not isinstance(result["updatedPermissions"], list):
            return "updatedPermissions is not a list"
        return None
    if behavior == "deny":
        message = result.get("message")
        if not isinstance(message, str) or not message.strip():
            return "a deny without a message"
        return None
    return 'a behavior that is neither "allow" nor "deny"'


def _result(result: Mapping[str, Any]) -> CallToolResult:
    # Never is_error: the CLI reads the permission result from the text either way.
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(result))])


def _deny(message: str) -> CallToolResult:
    return _result({"behavior": "deny", "message": message})


async def approve(
    config_path_env: str | None,
    tool_name: str,
    tool_input: Mapping[str, Any],
    tool_use_id: str,
    *,
    client_factory: ClientFactory = shared_client,
) -> CallToolResult:
    """Relay one permission request to PromptManager and wait for the person's decision.

    ``config_path_env`` is the value of ``ASK_USER_CONFIG``. The result is allow only when
    PromptManager said allow; it never raises.
    """
    name = tool_name.strip() or "tool"
    try:
        config = await current_config(config_path_env)
    except ConfigError as exc:
        return _deny(answers.approval_not_configured(name, str(exc)))

    try:
        async with client_factory() as client:
            relayed = await relay_permission(client, config, tool_name, dict(tool_input), tool_use_id)
            result = await wait_for_decision(client, config, relayed)
    except RunFinished:
        return _deny(answers.approval_run_ended(name))
    except RequestRejected as exc:
        return _deny(answers.approval_rejected(name, exc.detail))
    except DecisionTimedOut as exc:
        return _deny(answers.approval_timed_out(name, exc.timeout))
    except DecisionMalformed as exc:
        return _deny(answers.approval_malformed(name, exc.problem))
    except RelayUnavailable as exc:
        return _deny(answers.approval_unreachable(name, exc.reason))
    except Exception:
        # An exception would reach the CLI as an error result, not a decision; deny with a sentence.
        logger.exception("approve failed for a %s call", name)
        return _deny(answers.approval_unreachable(name, "an internal error in the approve tool"))

    problem = result_problem(result)
    if problem is not None:
        logger.warning("poll-decision returned an invalid permission result for %s: %s", name, problem)
        return _deny(answers.approval_malformed(name, problem))
    return _result(result)
