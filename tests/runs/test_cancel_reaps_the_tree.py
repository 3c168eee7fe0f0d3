"""Cancel ends the whole process tree: the CLI, its MCP server and the
Bash commands it runs in sessions of their own, even when they ignore SIGTERM.
That tree also runs at a lower CPU priority than the server."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from promptmgr.models import Run
from promptmgr.processes import MAX_NICE
from tests.helpers import (
    WAIT_RULE,
    allow_in_workspace,
    login_client,
    make_project,
    processes_in,
    read_sse,
    run_workdir,
    script,
    start_run,
    use_fake_cli,
    wait_command,
    wait_until,
)

pytestmark = pytest.mark.e2e


def sessions_of(pids: list[int]) -> set[int]:
    sessions = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            sessions.add(os.getsid(pid))
    return sessions


def nice_of(pid: int) -> int | None:
    with contextlib.suppress(ProcessLookupError):
        return os.getpriority(os.PRIO_PROCESS, pid)
    return None


PYTHON_SLEEP = {"command": wait_command(120), "description": "wait"}


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_cancel_during_a_bash_command_leaves_no_process(app_server: Any, alice: Any, engine: str) -> None:
    project = make_project(owner=alice, engine=engine)
    allow_in_workspace(project, WAIT_RULE)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"tool_use": {"name": "Bash", "input": PYTHON_SLEEP}}))
    read_sse(client, started["events_url"], until=lambda e: e.event == "tool_use")
    workspace = run_workdir(started["run_id"])
    # The CLI (with the ask-user MCP server on the cli engine) and the Bash command, in a
    # session of its own, which it enters a moment after it was forked.
    wait_until(
        lambda: len(sessions_of(processes_in(workspace))) >= 2,
        timeout=15,
        what="the Bash command to start in a session of its own",
    )
    # Claude's processes, the Bash command's included, have a lower CPU priority than the server.
    expected = min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, 0) + settings.CLAUDE_CLI_NICE)
    assert settings.CLAUDE_CLI_NICE > 0
    assert {nice for nice in map(nice_of, processes_in(workspace)) if nice is not None} == {expected}

    assert client.post(f"/api/runs/{started['run_id']}/cancel").status_code == 202
    events = read_sse(client, started["events_url"], timeout=30)
    assert events[-1].data == {"status": "cancelled"}
    assert processes_in(workspace) == []
    assert Run.objects.get(pk=started["run_id"]).error == "Cancelled by the user."


STUBBORN_CLI = """#!{python}
# A Claude Code stand-in that ignores SIGTERM and leaves a grandchild in a session of its
# own that ignores it too, the worst a CLI and its Bash commands can do. It speaks enough
# of both engines' input: a plain prompt (cli) or the SDK's control protocol (sdk).
import json, signal, subprocess, sys, time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
    start_new_session=True,
)
for line in sys.stdin:
    try:
        message = json.loads(line)
    except ValueError:
        message = {{"type": "user"}}  # the cli engine's prompt is plain text
    if message.get("type") == "control_request":
        reply = {{"subtype": "success", "request_id": message["request_id"], "response": {{}}}}
        print(json.dumps({{"type": "control_response", "response": reply}}), flush=True)
    elif message.get("type") == "user":
        init = {{"type": "system", "subtype": "init", "session_id": "stubborn", "tools": [], "mcp_servers": []}}
        delta = {{"type": "content_block_delta", "index": 0, "delta": {{"type": "text_delta", "text": "working"}}}}
        print(json.dumps(init), flush=True)
        print(json.dumps({{"type": "stream_event", "uuid": "u1", "session_id": "stubborn", "event": delta}}), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_cancel_kills_a_cli_that_ignores_sigterm_and_its_detached_children(
    app_server: Any, alice: Any, settings: Any, tmp_path: Path, engine: str
) -> None:
    use_fake_cli(settings, tmp_path, STUBBORN_CLI.format(python=sys.executable), "stubborn-claude")
    project = make_project(owner=alice, engine=engine, ask_user_enabled=False)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, "hello")
    read_sse(client, started["events_url"], until=lambda e: e.event == "text_delta")
    workspace = run_workdir(started["run_id"])
    # The guardian and the CLI in one session, the detached grandchild in another.
    wait_until(
        lambda: len(processes_in(workspace)) == 3 and len(sessions_of(processes_in(workspace))) == 2,
        timeout=10,
        what="the detached grandchild in a session of its own",
    )

    assert client.post(f"/api/runs/{started['run_id']}/cancel").status_code == 202
    events = read_sse(client, started["events_url"], timeout=40)
    assert events[-1].data == {"status": "cancelled"}
    assert processes_in(workspace) == []
    run = Run.objects.get(pk=started["run_id"])
    assert (run.status, run.error) == ("cancelled", "Cancelled by the user.")
