"""A relay token a tool prints never reaches the browser or the stored history.

Claude's Bash commands inherit ``ASK_USER_CONFIG`` from the CLI (the MCP server needs it
there), so a command can read the token file; its output is redacted before it becomes
an event.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from promptmgr.models import RunEvent
from tests.helpers import (
    QUOTE,
    allow_in_workspace,
    login_client,
    make_project,
    read_sse,
    script,
    start_run,
    tool_results,
    wait_until,
)

pytestmark = pytest.mark.e2e

READ_CONFIG = {
    "command": "python3 -c \"import os; print(open(os.environ['ASK_USER_CONFIG']).read())\"",
    "description": "read the ask-user config",
}


def test_a_token_printed_by_a_bash_command_is_redacted_everywhere(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    allow_in_workspace(project, "Bash(python3:*)")
    client = login_client(app_server, "alice", "alice-password")
    tokens: list[str] = []

    def capture_token() -> bool:
        for config in Path(app_server.secrets_dir()).glob("run-*/ask-user.json"):
            tokens.append(json.loads(config.read_text())["relayToken"])
        return bool(tokens)

    started = start_run(
        client, project.pk, script({"tool_use": {"name": "Bash", "input": READ_CONFIG}}, QUOTE)
    )
    wait_until(capture_token, timeout=20, what="the run's ask-user config")
    events = read_sse(client, started["events_url"])

    [printed] = tool_results(events)
    assert '"relayToken": "pmr_[redacted]"' in printed["text"], printed
    assert '"apiUrl"' in printed["text"], "the rest of what the command printed is kept"
    token = tokens[0]
    assert token not in json.dumps([e.data for e in events])
    stored = RunEvent.objects.filter(run_id=started["run_id"]).values_list("data", flat=True)
    assert stored and token not in json.dumps(list(stored))
    assert events[-1].data == {"status": "completed"}
