"""The CLI engine: ``claude -p --output-format stream-json`` with the prompt on its stdin.

Its input is stream-json too (``engines.inbox``): the prompt is the first message, and stdin
stays open for the messages a person sends while Claude works, until the turn is settled.

Claude asks through the ask-user MCP server, which reaches the app with the run's relay
token (``askuser``); the turn owns that relay session and closes it once the CLI is gone.
"""

from __future__ import annotations

import asyncio

from django.conf import settings

from askuser import facade as askuser
from promptmgr import sandbox
from promptmgr.cli import build_command, child_env, child_path, find_claude_cli
from promptmgr.processes import Line, LineTimeout, ManagedProcess
from promptmgr.workspaces import mcp_server_registered

from .base import Item, Message, TurnRequest, read_line, started
from .inbox import Delivery, TurnInput

# The run's prompt and later messages go in as stream-json lines (engines.inbox).
STREAM_JSON_INPUT = ["--input-format", "stream-json"]


class CLITurn:
    """The CLI's process, its stdout read as stream-json items."""

    errors: tuple[str, ...] = ()  # the CLI engine's failures are in its output and exit code

    def __init__(
        self,
        process: ManagedProcess,
        *,
        ask_user: bool,
        relay: askuser.RelaySession | None,
        confinement: sandbox.Confinement,
    ) -> None:
        self.process = process
        self.ask_user = ask_user
        self._relay = relay
        self._confinement = confinement
        # The relay token's revoke, started as soon as the turn is known to end.
        self._revoke: asyncio.Task[None] | None = None
        assert process.input is not None  # spawned with its input open
        self.input = TurnInput(write=process.input.write, end=process.input.close)

    async def next_item(self, timeout: float) -> Item | None | LineTimeout:
        return self._observed(_item(await self.process.next_line(timeout)))

    def ready_item(self) -> Item | None | LineTimeout:
        return self._observed(_item(self.process.ready_line()))

    def _observed(self, item: Item | None | LineTimeout) -> Item | None | LineTimeout:
        if isinstance(item, Message):
            self.input.observe(item.data)
        elif item is None:
            # The output ended (the CLI exited, or died): it reads no more answers.
            self._revoke_now()
        return item

    async def send_message(self, text: str, message_id: str) -> bool:
        return await self.input.send(text, message_id)

    def take_deliveries(self) -> list[Delivery]:
        return self.input.take_deliveries()

    def unstarted_messages(self) -> list[str]:
        return self.input.unstarted()

    def terminate(self) -> None:
        # The CLI may take a while to exit after its signal, and its MCP server polls on
        # meanwhile: the token ends now, so an answer given then stays for the run's end.
        self._revoke_now()
        self.process.terminate()

    def _revoke_now(self) -> None:
        """Start revoking the relay token (``askuser.relay_revoke``), once; ``stop`` awaits it.

        Called from the cancel's callback and the read loop, both on the run's event loop."""
        if self._relay is not None and self._revoke is None:
            self._revoke = asyncio.get_running_loop().create_task(askuser.relay_revoke(self._relay))

    async def stop(self) -> int:
        # Before the CLI's exit is waited for: an answer given meanwhile stays for the run's
        # end to send on, rather than go to a poll of a turn that reads no more.
        self._revoke_now()
        if self._revoke is not None:
            await self._revoke
        code = await self.process.stop()
        if self._relay is not None:
            relay, self._relay = self._relay, None
            await askuser.relay_close(relay)
        await self._confinement.aclose()
        return code

    def stderr_tail(self, limit: int = 4000) -> str:
        return self.process.stderr_tail(limit)


def _item(line: Line | None | LineTimeout) -> Item | None | LineTimeout:
    return read_line(line) if isinstance(line, Line) else line


async def start_turn(request: TurnRequest) -> CLITurn:
    """Confine the run to its working directory (``sandbox``; a host where the sandbox
    cannot start refuses the run), open its relay session (when the workspace registers
    ask-user) and spawn the CLI.

    In the ``run`` scope the CLI (some 300 ms before it reads its prompt) starts while the
    run's sandbox starts and its start snapshot is taken (``request.before_prompt``); its
    prompt goes in once both are done (``Confinement.open``), and until then a command it
    starts (a hook, a workspace's MCP server) waits in the run's pending prefix."""
    project = request.project
    ask_user = mcp_server_registered(project)
    confinement = await sandbox.confine(run_id=request.run_id, workdir=request.root, path=child_path())
    relay = None
    try:
        await confinement.before_spawn(request.before_prompt)
        if ask_user:
            relay = await askuser.relay_session_open(
                run_id=request.run_id,
                project_id=project.pk,
                stream_token=request.stream_token,
                timeout=project.ask_user_timeout,
            )
        command = build_command(
            cli=find_claude_cli(),
            project=project,
            resume_session_id=request.resume_session_id,
            ask_user=ask_user,
            run_settings=confinement.settings,
        )
        command += STREAM_JSON_INPUT
        env = (
            child_env(
                ask_user_config=relay.config_path if relay is not None else None,
                ask_user_timeout=project.ask_user_timeout,
                ask_user_warm=relay.warm_socket if relay is not None else None,
            )
            | confinement.cli_env
        )
        process = await ManagedProcess.spawn(
            command,
            cwd=request.root,
            env=env,
            stdin_data=None,
            nice=settings.CLAUDE_CLI_NICE,
        )
    except BaseException:
        # No turn will close the relay session: its secrets go now.
        if relay is not None:
            await askuser.relay_close(relay)
        await confinement.aclose()
        raise
    turn = CLITurn(process, ask_user=ask_user, relay=relay, confinement=confinement)

    async def first() -> None:
        await confinement.open(after=request.before_prompt)
        await turn.input.send_prompt(request.prompt, request.prompt_id)

    return await started(turn, confinement, first=first)
