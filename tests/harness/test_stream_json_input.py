"""The CLI's stream-json input, which steering and late answers rely on, pinned against the bundled CLI.

``claude -p --input-format stream-json --output-format stream-json`` reads user messages
as JSON lines on stdin. The app writes the prompt so and keeps stdin open, so a message a
person sends while Claude works (or a late answer) can be written while the turn runs.
Each message carries a ``uuid``; the CLI reports what it does with it in
``command_lifecycle`` lines (queued, started, completed). What these tests pin:

- a message written while the turn runs is absorbed into that turn: the model receives it
  as a system message ("The user sent a new message while you were working: …") with the
  next tool result, and the run has one result;
- a message that arrives while the turn's last reply streams starts the next turn after the
  result, in the same process and session (a second result);
- with stdin open the CLI does not exit after the result; closing stdin ends it (exit 0);
- it resumes a session (``--resume``) and calls a permission prompt tool as in text mode.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.harness import contract_mcp_server as contract
from tests.harness.test_cli_contract import Workspace, bash
from tests.helpers import script

pytestmark = pytest.mark.e2e

INPUT_FLAGS = ("-p", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json")
STEER = "Please also mention the weather."
USER_MESSAGES = "User messages received: "
SLOW_TEXT = {"text": "y" * 120, "pace_ms": 25, "chunk_chars": 1}


def user_line(text: str, message_id: str) -> str:
    return (
        json.dumps({"type": "user", "message": {"role": "user", "content": text}, "uuid": message_id}) + "\n"
    )


class StreamingCli:
    """The CLI with its stdin kept open, its stdout lines read by a thread."""

    def __init__(self, workspace: Workspace, *extra: str) -> None:
        self.process = subprocess.Popen(
            [workspace.claude, *INPUT_FLAGS, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workspace.root,
            env=workspace.env,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip():
                self._queue.put(json.loads(line))
        self._queue.put(None)

    def send(self, text: str) -> str:
        message_id = str(uuid.uuid4())
        assert self.process.stdin is not None
        self.process.stdin.write(user_line(text, message_id))
        self.process.stdin.flush()
        return message_id

    def close_input(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def read_until(self, stop: Any, timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            line = self._queue.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"the CLI's output ended; got {[x['type'] for x in self.lines]}")
            self.lines.append(line)
            if stop(line):
                return line

    def finish(self, timeout: float = 60) -> int:
        code = self.process.wait(timeout=timeout)
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        return code

    def results(self) -> list[dict[str, Any]]:
        return [x for x in self.lines if x["type"] == "result"]

    def lifecycle(self, message_id: str) -> list[str]:
        return [
            x["state"]
            for x in self.lines
            if x["type"] == "command_lifecycle" and x.get("command_uuid") == message_id
        ]

    def index(self, check: Any) -> int:
        return next(i for i, x in enumerate(self.lines) if check(x))


def is_result(line: dict[str, Any]) -> bool:
    return bool(line["type"] == "result")


def first_delta(line: dict[str, Any]) -> bool:
    return line["type"] == "stream_event" and (line.get("event") or {}).get("type") == "content_block_delta"


def quoted_user_messages(result: dict[str, Any]) -> list[str]:
    text = str(result["result"])
    assert USER_MESSAGES in text, text
    return list(json.loads(text.split(USER_MESSAGES, 1)[1]))


@pytest.fixture
def workspace(model_settings: Any, claude_cli: str, tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "workspace", claude_cli)


@pytest.fixture
def cli(workspace: Workspace) -> Any:
    started: list[StreamingCli] = []

    def start(*extra: str) -> StreamingCli:
        process = StreamingCli(workspace, "--include-partial-messages", *extra)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.process.poll() is None:
            process.process.kill()
            process.process.wait(timeout=10)


def test_a_message_written_while_the_turn_runs_is_absorbed_into_that_turn(cli: Any) -> None:
    run = cli()
    prompt_id = run.send(script({**SLOW_TEXT, **bash("echo one")}, {"quote_user_messages": True}))
    run.read_until(first_delta)
    steer_id = run.send(STEER)
    result = run.read_until(is_result)

    # The model got it inside the running turn, with the tool result: one result in all.
    assert quoted_user_messages(result) == [STEER]
    started = run.index(lambda x: x.get("command_uuid") == steer_id and x.get("state") == "started")
    assert started < run.index(is_result)
    run.close_input()
    assert run.finish() == 0
    assert len(run.results()) == 1
    assert run.lifecycle(prompt_id) == ["queued", "started", "completed"]
    assert run.lifecycle(steer_id) == ["queued", "started", "completed"]


def test_a_message_sent_during_the_last_reply_starts_the_next_turn_after_the_result(cli: Any) -> None:
    run = cli()
    run.send(script(SLOW_TEXT))
    run.read_until(first_delta)
    steer_id = run.send("Next: " + script({"text": "second turn", "quote_earlier_prompts": True}))
    first = run.read_until(is_result)
    second = run.read_until(is_result)

    assert first["result"] == SLOW_TEXT["text"]
    assert second["result"].startswith("second turn\nEarlier prompts: ")
    assert second["session_id"] == first["session_id"]
    # It started only once the first turn was over, and the CLI says so before its reply.
    assert run.index(lambda x: x.get("command_uuid") == steer_id and x.get("state") == "started") > run.index(
        is_result
    )
    run.close_input()
    assert run.finish() == 0


def test_with_stdin_open_the_cli_waits_after_the_result_and_exits_once_stdin_closes(cli: Any) -> None:
    run = cli()
    run.send(script({"text": "done"}))
    run.read_until(is_result)
    time.sleep(1.5)
    assert run.process.poll() is None
    run.close_input()
    assert run.finish() == 0


def test_a_message_written_after_the_result_starts_another_turn_in_the_same_process(cli: Any) -> None:
    run = cli()
    run.send(script({"text": "first"}))
    first = run.read_until(is_result)
    run.send(script({"text": "again"}))
    second = run.read_until(is_result)
    run.close_input()
    assert run.finish() == 0
    assert (first["result"], second["result"]) == ("first", "again")


def test_stream_json_input_resumes_a_session(cli: Any) -> None:
    run = cli()
    run.send("First prompt " + script({"text": "one"}))
    session = run.read_until(is_result)["session_id"]
    run.close_input()
    assert run.finish() == 0

    resumed = cli("--resume", session)
    resumed.send(script({"text": "two", "quote_earlier_prompts": True}))
    result = resumed.read_until(is_result)
    resumed.close_input()
    assert resumed.finish() == 0
    assert "First prompt SCRIPT:" in result["result"]


def test_stream_json_input_calls_the_permission_prompt_tool_as_text_mode_does(
    cli: Any, workspace: Workspace
) -> None:
    workspace.register_in_mcp_json()
    run = cli("--permission-prompt-tool", "mcp__contract__decide", "--permission-mode", "default")
    run.send(script(bash("touch made.txt"), {"quote_tool_results": True}))
    result = run.read_until(is_result)
    run.close_input()
    assert run.finish() == 0
    assert workspace.asked_commands() == ["touch made.txt"]
    assert contract.DENY_MESSAGE in str(result["result"])


def test_plain_text_on_stream_json_input_ends_the_cli_with_an_error(workspace: Workspace) -> None:
    """The prompt must be a JSON line: the app writes it so, never as bare text."""
    completed = subprocess.run(
        [workspace.claude, *INPUT_FLAGS],
        input="hello\n",
        capture_output=True,
        text=True,
        cwd=workspace.root,
        env=workspace.env,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 1
    assert "Error parsing streaming input line" in completed.stderr
