"""The SDK engine's Claude Code process, held to the rules the CLI engine's follows.

claude-agent-sdk 0.2.187's ``SubprocessCLITransport`` starts the CLI with the whole server
environment underneath ``options.env`` (so SECRET_KEY, DATABASE_URL… would reach Claude
and every tool it runs), in the server's own process group, and its ``close()`` signals
the CLI alone. This subclass starts the very same command line with only the allowlisted
environment, in a session of its own, started with vfork as the CLI engine's is
(``PipedProcess``, not ``anyio.open_process``), and copies every message the CLI prints
to a callback, so the run supervisor sees exactly the stream-json lines the CLI engine sees.

The CLI runs each Bash command in a session of its own, so killing the CLI's group is not
enough: ``processes.ProcessTree`` signals the groups of the whole process tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

from anyio import ClosedResourceError, EndOfStream
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from anyio.streams.text import TextReceiveStream, TextSendStream
from claude_agent_sdk import ClaudeAgentOptions, CLIConnectionError, __version__
from claude_agent_sdk._internal._task_compat import spawn_detached
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
from django.conf import settings

from promptmgr.processes import PipedChild, SpawnedChild, spawn_piped, write_all

# What the SDK's own transport adds to the CLI's environment (see its ``connect()``).
SDK_ENV = {
    "CLAUDE_CODE_ENTRYPOINT": "sdk-py",
    "CLAUDE_AGENT_SDK_VERSION": __version__,
    "CLAUDE_CODE_SDK_READS_SESSION_STATE": "1",
}


class _PipeReceiveStream(ByteReceiveStream):
    """One of the child's output pipes as the anyio stream the SDK reads."""

    def __init__(self, reader: asyncio.StreamReader, transport: asyncio.ReadTransport) -> None:
        self._reader = reader
        self._transport = transport

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self._reader.read(max_bytes)
        if not data:
            raise EndOfStream
        return data

    async def aclose(self) -> None:
        self._reader.set_exception(ClosedResourceError())
        self._transport.close()


class _PipeSendStream(ByteSendStream):
    """The child's input pipe as the anyio stream the SDK writes to."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    async def send(self, item: bytes) -> None:
        if self._fd is None:
            raise ClosedResourceError
        await write_all(self._fd, item)

    async def aclose(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:  # once: the descriptor's number may be reused after
            os.close(fd)


class PipedProcess(Process):
    """The CLI started by ``processes.spawn_piped``, as the anyio process the SDK's
    transport would get from ``anyio.open_process`` (why not that: ``SpawnedChild``)."""

    def __init__(self, piped: PipedChild) -> None:
        self._child: SpawnedChild = piped.child
        self._stdin = _PipeSendStream(piped.stdin)
        self._stdout = _PipeReceiveStream(piped.stdout, piped.stdout_transport)
        self._stderr = _PipeReceiveStream(piped.stderr, piped.stderr_transport)

    async def aclose(self) -> None:
        for stream in (self._stdin, self._stdout, self._stderr):
            await stream.aclose()
        await self.wait()

    async def wait(self) -> int:
        return await self._child.wait()

    def send_signal(self, sig: signal.Signals) -> None:
        if self._child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    @property
    def pid(self) -> int:
        return self._child.pid

    @property
    def returncode(self) -> int | None:
        return self._child.returncode

    @property
    def stdin(self) -> ByteSendStream:
        return self._stdin

    @property
    def stdout(self) -> ByteReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> ByteReceiveStream:
        return self._stderr


class IsolatedCLITransport(SubprocessCLITransport):
    """``SubprocessCLITransport`` with our environment, a new session and a message tap."""

    def __init__(
        self,
        options: ClaudeAgentOptions,
        *,
        env: dict[str, str],
        on_message: Callable[[dict[str, Any]], None],
        on_end: Callable[[], None],
    ) -> None:
        super().__init__(prompt="", options=options)
        self._env = env
        self._on_message = on_message
        self._on_end = on_end
        # Kept after close(), which forgets its own handle: the pid and exit code live on.
        self.spawned: Process | None = None

    async def connect(self) -> None:
        if self._process is not None:
            return
        env = {**self._env, **SDK_ENV}
        if self._cwd:
            env["PWD"] = self._cwd
        try:
            process = PipedProcess(
                await spawn_piped(
                    self._build_command(), cwd=self._cwd, env=env, nice=settings.CLAUDE_CLI_NICE
                )
            )
        except OSError as exc:
            raise CLIConnectionError(f"Failed to start Claude Code: {exc}") from exc
        self.spawned = self._process = process
        self._stdout_stream = TextReceiveStream(process.stdout)
        self._stdin_stream = TextSendStream(process.stdin)
        self._stderr_stream = TextReceiveStream(process.stderr)
        self._stderr_task = spawn_detached(self._handle_stderr())
        self._ready = True

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        return self._tapped(super().read_messages())

    async def _tapped(self, messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        try:
            async for message in messages:
                self._on_message(message)
                yield message
        finally:
            self._on_end()
