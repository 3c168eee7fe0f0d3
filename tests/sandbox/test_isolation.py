"""One user's run cannot reach another user's project, the database or any relay config,
even with every tool call approved, and the model never receives a relay token.

The real app, the real CLI (both engines) and its sandbox; only the model is scripted. Alice
has a project whose context holds a canary, and a run waiting for her answer (so its relay
config exists). Bob approves every tool call of his own run, which tries Bash, Read and Grep
on all of it. What the scripted model received is read back from its request log.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.db import connection

from askuser.runtime import EncodedToken
from tests.conftest import LiveServer
from tests.helpers import (
    QUOTE,
    ask,
    login_client,
    make_project,
    next_question,
    read_sse,
    script,
    start_run,
    tool_results,
    wait_until,
)

pytestmark = pytest.mark.e2e

SQLITE_HEADER = "SQLite format 3"


def bash(command: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "look around"}}}


def tool(name: str, **tool_input: Any) -> dict[str, Any]:
    return {"tool_use": {"name": name, "input": tool_input}}


def relay_configs() -> dict[Path, str]:
    """Every live run's relay config and the token in it."""
    return {
        path: json.loads(path.read_text())["relayToken"]
        for path in Path(settings.RUN_SECRETS_DIR).glob("run-*/ask-user.json")
    }


def spellings(token: str) -> list[str]:
    return [token, *EncodedToken.of(token).texts]


class Approver:
    """Bob at the browser: allows every permission card of one run as it appears."""

    def __init__(self, client: httpx.Client, events_url: str) -> None:
        self.client = client
        self.events_url = events_url
        self.allowed: list[str] = []
        self._thread = threading.Thread(target=self._approve, daemon=True)
        self._thread.start()

    def _approve(self) -> None:
        def on_event(event: Any) -> bool:
            if event.event == "permission_request":
                decision = {"request_id": event.data["request_id"], "decision": "allow"}
                assert self.client.post("/api/askuser/submit-decision", json=decision).status_code == 200
                self.allowed.append(str(event.data["tool_name"]))
            return bool(event.event == "done")

        read_sse(self.client, self.events_url, until=on_event, timeout=240)

    def join(self) -> None:
        self._thread.join(timeout=240)


def files_named(root: Path, name: str) -> list[Path]:
    """The files called ``name`` under ``root``. A walk, not ``rglob``: the running CLI
    makes and removes lock directories in its home meanwhile, and ``rglob`` raised for
    one that vanished under it, where the walk passes over it."""
    return [Path(folder) / name for folder, _dirs, files in os.walk(root) if name in files]


@pytest.fixture
def alices_waiting_run(app_server: LiveServer, alice: Any) -> Iterator[dict[str, Any]]:
    """Alice's project with a canary in its context, and her run waiting for an answer."""
    canary = f"zebra-{uuid.uuid4().hex}"
    project = make_project(owner=alice, engine="cli", context=f"The launch code is {canary}.")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask("Deploy now?", ["Yes", "No"])))
    next_question(client, started["events_url"])
    [(config, token)] = relay_configs().items()
    context_files = [
        path
        for path in files_named(Path(settings.STORAGE_ROOT), "CLAUDE.local.md")
        if canary in path.read_text()
    ]
    assert context_files, "the project context is in the workspace"
    yield {"canary": canary, "context": context_files[0], "config": config, "token": token}
    client.post(f"/api/runs/{started['run_id']}/cancel")
    client.close()


def bobs_requests(scripted_model_url: str, nonce: str) -> list[str]:
    """What the model was sent during Bob's run (his prompt carries ``nonce``)."""
    sent = httpx.get(f"{scripted_model_url}/_scripted/requests", timeout=10).json()
    bodies = [json.dumps(body) for body in sent]
    return [body for body in bodies if nonce in body]


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_approved_tools_in_one_project_reach_nothing_of_another_user_the_database_or_any_relay_config(
    app_server: LiveServer, alices_waiting_run: dict[str, Any], bob: Any, scripted_model_url: str, engine: str
) -> None:
    alice = alices_waiting_run
    database = Path(connection.settings_dict["NAME"])
    assert database.is_file() and SQLITE_HEADER.encode() in database.read_bytes()[:16]
    secrets_dir = Path(settings.RUN_SECRETS_DIR)
    nonce = f"bob-{uuid.uuid4().hex}"
    # The canary is searched for by a pattern, so the prompt itself never holds it.
    pattern = "zebr[a]-[0-9a-f]\\{32\\}"
    steps = [
        {"text": nonce, **bash(f"cat {alice['context']}")},
        bash(f"cat {database}"),
        bash(f"cat {secrets_dir}/run-*/ask-user.json"),
        bash(f"grep -rls '{pattern}' /tmp /work /root /var; echo searched"),
        bash("cat /proc/*/environ | tr '\\0' '\\n' | grep -a -e ASK_USER -e relayToken; echo scanned"),
        bash(f"python3 -c \"import glob; print([open(p).read() for p in glob.glob('{secrets_dir}/*/*')])\""),
        tool("Read", file_path=str(alice["context"])),
        tool("Read", file_path=str(database)),
        tool("Read", file_path=str(alice["config"])),
        tool("Grep", pattern="zebra", path=str(settings.STORAGE_ROOT), output_mode="content"),
        QUOTE,
    ]
    project = make_project(owner=bob, engine=engine, permission_mode="default")
    client = login_client(app_server, "bob", "bob-password")
    started = start_run(client, project.pk, script(*steps))
    bobs_tokens: list[str] = []
    if engine == "cli":
        # Bob's own run has a relay config too: the model must not see that token either.
        wait_until(lambda: len(relay_configs()) == 2, timeout=30, what="Bob's relay config")
        bobs_tokens = [t for t in relay_configs().values() if t != alice["token"]]
    approver = Approver(login_client(app_server, "bob", "bob-password"), started["events_url"])
    events = read_sse(client, started["events_url"], timeout=240)
    approver.join()

    assert events[-1].data == {"status": "completed"}, [(e.event, e.data) for e in events[-6:]]
    results = [str(result["text"]) for result in tool_results(events)]
    assert len(results) == len(steps) - 1
    assert "Bash" in approver.allowed, "at least the harmless-looking commands were approved by Bob"
    secrets = [alice["canary"], SQLITE_HEADER, *spellings(alice["token"])]
    for token in bobs_tokens:
        secrets += spellings(token)
    leaked_to_tools = [s for s in secrets if any(s in text for text in results)]
    assert leaked_to_tools == [], results
    assert results[3].endswith("searched") and results[4].endswith("scanned")
    sent = bobs_requests(scripted_model_url, nonce)
    assert sent, "the scripted model logged Bob's requests"
    assert [s for s in secrets if any(s in body for body in sent)] == []
    assert events[-1].data == {"status": "completed"}


def test_without_the_sandbox_the_same_approved_command_would_read_the_canary(
    app_server: LiveServer, alices_waiting_run: dict[str, Any], bob: Any, settings: Any
) -> None:
    """The control: what the test above looks for is there to be found once the sandbox is off."""
    settings.CLAUDE_SANDBOX = False
    project = make_project(owner=bob, engine="cli", permission_mode="default")
    client = login_client(app_server, "bob", "bob-password")
    started = start_run(client, project.pk, script(bash(f"cat {alices_waiting_run['context']}"), QUOTE))
    approver = Approver(login_client(app_server, "bob", "bob-password"), started["events_url"])
    events = read_sse(client, started["events_url"], timeout=240)
    approver.join()
    [result] = tool_results(events)
    assert alices_waiting_run["canary"] in result["text"]
