"""The SDK engine's transport: the SDK's ``Transport`` over a CLI started as the CLI engine's is.

Real child processes stand in for the CLI; no SDK client and no model run here.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import CLIConnectionError, ProcessError

from promptmgr.engines import transport as transport_module
from promptmgr.engines.base import Garbage, Item, Message
from promptmgr.engines.transport import SDK_ENV, IsolatedCLITransport
from promptmgr.processes import DEFAULT_MAX_LINE, Line, ManagedProcess, live_processes, process_tree

pytestmark = pytest.mark.unit

ECHO = (
    "import json, sys\n"
    "for line in sys.stdin:\n"
    "    print(json.dumps({'got': len(json.loads(line)['text'])}), flush=True)\n"
    "print('bye', file=sys.stderr, flush=True)\n"
    "sys.exit(3)\n"
)


class Tap:
    """What the transport hands the supervisor's side."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.ends = 0

    def item(self, item: Item) -> None:
        self.items.append(item)

    def end(self) -> None:
        self.ends += 1


def transport_for(
    argv: list[str], tmp_path: Path, tap: Tap, env: dict[str, str] | None = None
) -> IsolatedCLITransport:
    return IsolatedCLITransport(
        argv,
        cwd=tmp_path,
        env=env if env is not None else {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"},
        on_item=tap.item,
        on_end=tap.end,
    )


async def read_all(transport: IsolatedCLITransport) -> list[dict[str, Any]]:
    return [message async for message in transport.read_messages()]


async def test_input_output_errors_and_exit_code_go_through_the_transport(tmp_path: Path) -> None:
    tap = Tap()
    transport = transport_for([sys.executable, "-c", ECHO], tmp_path, tap)
    await transport.connect()
    assert transport.is_ready()
    reading = asyncio.create_task(read_all(transport))
    await transport.write(json.dumps({"text": "one"}) + "\n")
    # Far more than the pipe holds: the write waits for the child, and arrives whole.
    await transport.write(json.dumps({"text": "x" * 2_000_000}) + "\n")
    for _ in range(2_000):
        await transport.write(json.dumps({"text": "two"}) + "\n")
    await transport.end_input()
    await transport.end_input()  # a second end is harmless

    with pytest.raises(ProcessError) as failed:
        await asyncio.wait_for(reading, 30)
    assert failed.value.exit_code == 3
    expected = [{"got": 3}, {"got": 2_000_000}] + [{"got": 3}] * 2_000
    assert [item.data for item in tap.items if isinstance(item, Message)] == expected
    assert len(tap.items) == len(expected) and tap.ends == 1
    with pytest.raises(CLIConnectionError):
        await transport.write(json.dumps({"text": "late"}) + "\n")
    await transport.close()
    assert transport.process is not None and transport.process.stderr_tail() == "bye\n"
    assert not transport.is_ready()


PRINTS_EVERYTHING = """
import json, sys
print(json.dumps({"type": "first"}))
print("Segmentation fault (not json)")
print("[1, 2]")
print("x" * (%d + 10))
print(json.dumps({"type": "user", "content": "the token %s"}))
print(json.dumps({"type": "last"}), flush=True)
"""


async def test_the_sdk_gets_the_json_objects_and_the_tap_gets_every_line_tokens_redacted(
    tmp_path: Path,
) -> None:
    token = f"pmr_5_{secrets.token_urlsafe(32)}"
    tap = Tap()
    transport = transport_for(
        [sys.executable, "-c", PRINTS_EVERYTHING % (DEFAULT_MAX_LINE, token)], tmp_path, tap
    )
    await transport.connect()

    sdk_saw = await asyncio.wait_for(read_all(transport), 30)
    await transport.close()

    # The SDK answers the CLI's requests with what it asked, token and all.
    assert sdk_saw == [{"type": "first"}, {"type": "user", "content": f"the token {token}"}, {"type": "last"}]
    first, not_json, array, cut, with_token, last = tap.items
    assert isinstance(first, Message) and first.data == {"type": "first"}
    assert not_json == Garbage(b"Segmentation fault (not json)")
    assert array == Garbage(b"[1, 2]")
    assert isinstance(cut, Garbage) and cut.truncated and len(cut.data) == DEFAULT_MAX_LINE
    assert isinstance(with_token, Message)
    assert with_token.data == {"type": "user", "content": "the token pmr_[redacted]"}
    assert token.encode() not in with_token.line
    assert isinstance(last, Message) and last.data == {"type": "last"}
    assert tap.ends == 1


async def test_the_cli_starts_in_a_session_of_its_own_at_a_lower_priority_with_only_its_environment(
    tmp_path: Path, settings: Any
) -> None:
    settings.CLAUDE_CLI_NICE = 5
    cli = tmp_path / "claude"
    cli.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        "print(json.dumps({'nice': os.getpriority(os.PRIO_PROCESS, 0), 'sid': os.getsid(0),\n"
        "                  'argv': sys.argv[1:], 'cwd': os.getcwd(), 'env': dict(os.environ)}), flush=True)\n"
        "time.sleep(60)\n"
    )
    cli.chmod(0o755)
    tap = Tap()
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "HOME": str(tmp_path)}
    transport = transport_for([str(cli), "--output-format", "stream-json"], tmp_path, tap, env=env)
    await transport.connect()
    assert transport.process is not None
    try:
        messages = transport.read_messages()
        started = await asyncio.wait_for(anext(messages), 10)
        assert started["nice"] == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)
        assert started["sid"] == transport.process.pid
        assert started["argv"] == ["--output-format", "stream-json"]
        assert started["cwd"] == str(tmp_path)
        assert started["env"] == {**env, **SDK_ENV, "PWD": str(tmp_path)}
    finally:
        await transport.close()
    assert transport.process.proc.returncode == -signal.SIGTERM


async def test_close_reaps_a_cli_that_outlives_its_input_and_the_session_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport_module, "EXIT_AFTER_INPUT", 0.2)
    code = (
        "import json, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
        "print(json.dumps({'child': child.pid}), flush=True)\n"
        "sys.stdin.read()\n"
        "time.sleep(120)\n"
    )
    tap = Tap()
    transport = transport_for([sys.executable, "-c", code], tmp_path, tap)
    await transport.connect()
    assert transport.process is not None
    started = await asyncio.wait_for(anext(transport.read_messages()), 10)
    tree = process_tree(transport.process.pid)
    assert started["child"] in tree and len(set(tree.values())) == 2  # two sessions

    await asyncio.wait_for(transport.close(), 15)

    assert process_tree(transport.process.pid) == {}
    assert started["child"] not in {p.pid for p in live_processes()}  # a zombie at most


async def test_closing_the_input_during_a_write_lets_the_write_end_whole_then_ends_the_input(
    tmp_path: Path,
) -> None:
    # The child reads nothing for a moment, so the write waits on a full pipe.
    code = "import sys, time; time.sleep(1); print(len(sys.stdin.buffer.read()), flush=True)"
    process = await ManagedProcess.spawn(
        [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), stdin_data=None
    )
    assert process.input is not None
    writing = asyncio.create_task(process.input.write(b"x" * 2_000_000))
    await asyncio.sleep(0.2)
    assert not writing.done()

    process.input.close()
    await asyncio.wait_for(writing, 10)

    assert await process.next_line(10) == Line(b"2000000")
    assert await process.next_line(10) is None
    with pytest.raises(BrokenPipeError):
        await process.input.write(b"late")
    assert await process.stop() == 0


async def test_stop_closes_an_input_left_open(tmp_path: Path) -> None:
    process = await ManagedProcess.spawn(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        cwd=tmp_path,
        env=dict(os.environ),
        stdin_data=None,
    )
    stdin = process.input
    assert stdin is not None
    was_open = not stdin.closed

    assert await process.stop() == -signal.SIGTERM

    assert was_open and stdin.closed
    with pytest.raises(BrokenPipeError):
        await stdin.write(b"late")
