"""The offline demo model's triggers: each word picks its scenario, and with ask-user off
(no ask tool offered) the model says so instead of asking or waiting for an approval."""

from __future__ import annotations

from typing import Any

import pytest

from core.tool_names import ASK_USER_QUESTION, MCP_ASK_USER
from promptmgr.scripted_model.scenarios import DEMO_COMMAND, DEMO_TRIGGERS, demo_trigger, next_reply

pytestmark = pytest.mark.unit


def request(prompt: str, tools: list[str], system: str = "") -> dict[str, Any]:
    return {
        "system": [{"type": "text", "text": system}],
        "messages": [{"role": "user", "content": prompt}],
        "tools": [{"name": name} for name in tools],
    }


@pytest.mark.parametrize("trigger", DEMO_TRIGGERS, ids=lambda t: t.word)
def test_each_example_prompt_picks_its_own_trigger(trigger: Any) -> None:
    assert demo_trigger(trigger.example) == trigger.word


def test_ask_uses_the_mcp_tool_and_form_asks_two_questions_at_once() -> None:
    ask = next_reply(request("Please ask me something", [MCP_ASK_USER, ASK_USER_QUESTION]))
    form = next_reply(request("Show me a form", [MCP_ASK_USER, ASK_USER_QUESTION]))

    assert ask.tool_use is not None and ask.tool_use.name == MCP_ASK_USER
    assert form.tool_use is not None and form.tool_use.name == ASK_USER_QUESTION
    assert len(form.tool_use.input["questions"]) == 2


def test_run_calls_bash_and_edit_writes_in_the_working_directory() -> None:
    run = next_reply(request("Run a command", [MCP_ASK_USER]))
    edit = next_reply(request("Edit a file", [], system="<env>\nWorking directory: /work/space\n</env>"))

    assert run.tool_use is not None and run.tool_use.input["command"] == DEMO_COMMAND
    assert edit.tool_use is not None and edit.tool_use.name == "Write"
    assert edit.tool_use.input["file_path"] == "/work/space/demo/greeting.md"


@pytest.mark.parametrize("prompt", ["Please ask me", "Show me a form", "Run a command"])
def test_with_ask_user_off_the_model_says_so_and_calls_no_tool(prompt: str) -> None:
    reply = next_reply(request(prompt, ["Bash", "Edit", "Write"]))

    assert reply.tool_use is None
    assert "Questions and approvals are **off**" in reply.text


def test_a_free_prompt_lists_the_triggers_and_marks_those_that_are_off() -> None:
    on = next_reply(request("hello", [MCP_ASK_USER])).text
    off = next_reply(request("hello", [])).text

    for trigger in DEMO_TRIGGERS:
        assert f"*{trigger.word}*: {trigger.what}" in on
    assert "off" not in on.replace("offline", "")
    assert off.count("(off: questions are off for this project)") == 3
