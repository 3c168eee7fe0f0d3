"""The SDK engine's CLI process: started with vfork, behaving as the anyio process the SDK expects."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from anyio import ClosedResourceError, EndOfStream
from anyio.abc import ByteReceiveStream
from claude_agent_sdk import ClaudeAgentOptions

from promptmgr.engines.transport import IsolatedCLITransport, PipedProcess
from promptmgr.processes import spawn_piped

pytestmark = pytest.mark.unit

ECHO = (
    "import sys\n"
    "for line in sys.stdin:\n"
    "    print('got ' + line.strip(), flush=True)\n"
    "print('bye', file=sys.stderr, flush=True)\n"
    "sys.exit(3)\n"
)


async def start(code: str, tmp_path: Path) -> PipedProcess:
    return PipedProcess(
        await spawn_piped([sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), nice=0)
    )


async def read_all(stream: ByteReceiveStream) -> bytes:
    out = b""
    while True:
        try:
            out += await stream.receive()
        except EndOfStream:
            return out


async def test_input_output_errors_and_exit_code_go_through_the_streams(tmp_path: Path) -> None:
    process = await start(ECHO, tmp_path)
    assert os.getsid(process.pid) == process.pid  # a session of its own, like the CLI engine's
    await process.stdin.send(b"one\n")
    await process.stdin.send(b"two\n" * 100_000)  # more than the pipe holds: send waits
    await process.stdin.aclose()
    await process.stdin.aclose()  # a second close is harmless

    output = await read_all(process.stdout)
    assert output.splitlines() == [b"got one"] + [b"got two"] * 100_000
    assert await read_all(process.stderr) == b"bye\n"
    assert await process.wait() == 3
    assert process.returncode == 3
    with pytest.raises(ClosedResourceError):
        await process.stdin.send(b"late\n")


async def test_terminate_and_kill_reach_the_child_and_not_a_reused_pid(tmp_path: Path) -> None:
    process = await start("import time; print('up', flush=True); time.sleep(60)", tmp_path)
    assert await process.stdout.receive() == b"up\n"
    assert process.returncode is None
    process.terminate()
    assert await process.wait() == -signal.SIGTERM
    # Once the exit is known, no signal goes out: the pid may belong to another process.
    process.kill()
    process.send_signal(signal.SIGKILL)
    assert process.returncode == -signal.SIGTERM


async def test_a_closed_output_stream_refuses_further_reads(tmp_path: Path) -> None:
    process = await start("import time; print('up', flush=True); time.sleep(60)", tmp_path)
    await process.stdout.aclose()
    with pytest.raises(ClosedResourceError):
        await process.stdout.receive()
    process.kill()
    await process.aclose()
    assert process.returncode == -signal.SIGKILL


async def test_the_sdk_transport_starts_its_cli_this_way_in_a_session_of_its_own_at_a_lower_priority(
    tmp_path: Path, settings: Any
) -> None:
    settings.CLAUDE_CLI_NICE = 5
    cli = tmp_path / "claude"
    cli.write_text('#!/bin/sh\necho "$(ps -o ni= -p $$) $(ps -o sid= -p $$)"\nexec sleep 60\n')
    cli.chmod(0o755)
    transport = IsolatedCLITransport(
        ClaudeAgentOptions(cli_path=str(cli), cwd=str(tmp_path)),
        env={"PATH": os.environ["PATH"]},
        on_message=lambda _message: None,
        on_end=lambda: None,
    )
    await transport.connect()
    process = transport.spawned
    assert isinstance(process, PipedProcess)
    try:
        nice, session = (await process.stdout.receive()).split()
        assert int(nice) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)
        assert int(session) == process.pid
    finally:
        process.kill()
        await process.wait()
        await transport.close()
