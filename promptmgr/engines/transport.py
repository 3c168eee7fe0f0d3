"""The SDK engine's Claude Code process, held to the rules the CLI engine's follows.

claude-agent-sdk 0.2.187's ``SubprocessCLITransport`` starts the CLI with the whole server
environment underneath ``options.env`` (so SECRET_KEY, DATABASE_URL… would reach Claude
and every tool it runs), in the server's own process group, and its ``close()`` signals
the CLI alone. This subclass starts the very same command line with only the allowlisted
environment, in a session of its own, and copies every message the CLI prints to a
callback, so the run supervisor sees exactly the stream-json lines the CLI engine sees.

The CLI runs each Bash command in a session of its own, so killing the CLI's group is not
enough: ``processes.ProcessTree`` signals the groups of the whole process tree.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from subprocess import PIPE
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream, TextSendStream
from claude_agent_sdk import ClaudeAgentOptions, CLIConnectionError, __version__
from claude_agent_sdk._internal._task_compat import spawn_detached
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
from django.conf import settings

from promptmgr.processes import lower_priority

# What the SDK's own transport adds to the CLI's environment (see its ``connect()``).
SDK_ENV = {
    "CLAUDE_CODE_ENTRYPOINT": "sdk-py",
    "CLAUDE_AGENT_SDK_VERSION": __version__,
    "CLAUDE_CODE_SDK_READS_SESSION_STATE": "1",
}


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
            process = await anyio.open_process(
                self._build_command(),
                stdin=PIPE,
                stdout=PIPE,
                stderr=PIPE,
                cwd=self._cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise CLIConnectionError(f"Failed to start Claude Code: {exc}") from exc
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        lower_priority(process.pid, settings.CLAUDE_CLI_NICE)
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
