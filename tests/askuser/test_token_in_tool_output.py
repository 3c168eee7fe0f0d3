"""A relay token a tool prints never reaches the browser or the stored history, in any
spelling (as such, hex, base64).

In the sandbox a command can neither see ``ASK_USER_CONFIG`` nor read the token file
(``tests/sandbox``). With the sandbox switched off (``CLAUDE_SANDBOX=off``) Claude's Bash
commands inherit ``ASK_USER_CONFIG`` from the CLI (the MCP server needs it there) and can
read the file; what they print is redacted before it becomes an event.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from askuser.runtime import EncodedToken
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
ENCODE_CONFIG = {
    "command": "python3 -c \"import os, base64; d = open(os.environ['ASK_USER_CONFIG'], 'rb').read(); "
    'print(base64.b64encode(d).decode()); print(d.hex())"',
    "description": "print the ask-user config in base64 and hex",
}


def test_a_token_printed_by_a_bash_command_is_redacted_everywhere(
    app_server: Any, alice: Any, settings: Any
) -> None:
    settings.CLAUDE_SANDBOX = False
    project = make_project(owner=alice)
    allow_in_workspace(project, "Bash(python3:*)")
    client = login_client(app_server, "alice", "alice-password")
    tokens: list[str] = []

    def capture_token() -> bool:
        for config in Path(app_server.secrets_dir()).glob("run-*/ask-user.json"):
            tokens.append(json.loads(config.read_text())["relayToken"])
        return bool(tokens)

    started = start_run(
        client,
        project.pk,
        script(
            {"tool_use": {"name": "Bash", "input": READ_CONFIG}},
            {"tool_use": {"name": "Bash", "input": ENCODE_CONFIG}},
            QUOTE,
        ),
    )
    wait_until(capture_token, timeout=20, what="the run's ask-user config")
    events = read_sse(client, started["events_url"])

    printed, encoded = tool_results(events)
    assert '"relayToken": "pmr_[redacted]"' in printed["text"], printed
    assert '"apiUrl"' in printed["text"], "the rest of what the command printed is kept"
    assert encoded["text"].count("pmr_[redacted]") == 2, encoded
    token = tokens[0]
    spellings = [token, *(s.decode() for s in EncodedToken.of(token).needles)]
    shown = json.dumps([e.data for e in events])
    assert [s for s in spellings if s in shown] == []
    stored = json.dumps(
        list(RunEvent.objects.filter(run_id=started["run_id"]).values_list("data", flat=True))
    )
    assert "pmr_[redacted]" in stored
    assert [s for s in spellings if s in stored] == []
    assert events[-1].data == {"status": "completed"}
