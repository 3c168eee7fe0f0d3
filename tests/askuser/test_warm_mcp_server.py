"""A run's ask-user MCP server is forked from its worker's warm server (askuser/warm_server.py,
mcp_server/warm.py): with the real CLI, uvicorn and the scripted model, and the warm
server's own life (started with the first ask-user run, gone after the idle time)."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from askuser.warm_server import CHILD_ENV, WarmServer, warm_server
from tests.helpers import (
    QUOTE,
    ask,
    live_parents,
    login_client,
    make_project,
    next_question,
    processes_in,
    read_sse,
    run_workdir,
    script,
    start_run,
    submit_answer,
    tool_results,
    wait_until,
)

pytestmark = pytest.mark.e2e


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def _environ_names(pid: int) -> set[str]:
    return {
        entry.split("=", 1)[0]
        for entry in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
        if entry
    }


@dataclass(frozen=True)
class Seen:
    pid: int
    parent: int
    cmdline: list[str]


def _ask_and_answer(client: Any, project_pk: int) -> tuple[list[Seen], list[Any]]:
    """A run that asks; the processes in its workspace while the card waits, and its events."""
    started = start_run(client, project_pk, script(ask("Which database?", ["SQLite", "PostgreSQL"]), QUOTE))
    card = next_question(client, started["events_url"])
    parents = live_parents()
    in_workspace = [
        Seen(pid, parents.get(pid, 0), _cmdline(pid)) for pid in processes_in(run_workdir(started["run_id"]))
    ]
    assert submit_answer(client, card.data["question_id"], selectedOptions=[1]).status_code == 200
    return in_workspace, read_sse(client, started["events_url"])


def test_a_runs_ask_user_server_is_forked_from_the_workers_warm_server(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")

    in_workspace, events = _ask_and_answer(client, project.pk)

    warm_pid = warm_server().pid
    assert warm_pid is not None
    assert _cmdline(warm_pid)[1:4] == ["-P", "-m", "mcp_server.warm"]
    # The server that relayed the question: the warm server's child, in the run's workspace.
    served = [seen.pid for seen in in_workspace if seen.parent == warm_pid]
    assert len(served) == 1
    # Its stub is the CLI's child, in the run's workspace too.
    stubs = [seen for seen in in_workspace if seen.cmdline[1:] == ["-P", "-m", "mcp_server"]]
    assert len(stubs) == 1
    assert stubs[0].parent in {seen.pid for seen in in_workspace}
    assert tool_results(events) == [{"text": "User selected: PostgreSQL", "is_error": False}]
    assert events[-1].data == {"status": "completed"}
    # The run's end took its served server along; the warm server waits for the next run.
    wait_until(lambda: not Path(f"/proc/{served[0]}").exists(), timeout=10, what="the served server to end")
    assert warm_server().pid == warm_pid
    # None of the worker's environment beyond the allowlist (no secret key, no database URL).
    assert _environ_names(warm_pid) <= set(CHILD_ENV)


def test_the_warm_server_goes_after_the_idle_time_and_the_next_run_starts_another(
    app_server: Any, alice: Any, settings: Any
) -> None:
    settings.ASK_USER_WARM_IDLE_SECONDS = 1
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")

    _ask_and_answer(client, project.pk)
    first = warm_server().pid
    assert first is not None
    wait_until(lambda: warm_server().pid is None, timeout=15, what="the idle warm server to stop")
    wait_until(lambda: first not in live_parents(), timeout=10, what="it to exit")

    in_workspace, events = _ask_and_answer(client, project.pk)

    second = warm_server().pid
    assert second is not None and second != first
    assert any(seen.parent == second for seen in in_workspace)
    assert events[-1].data == {"status": "completed"}


def test_with_the_warm_server_switched_off_the_cli_starts_the_whole_server(
    app_server: Any, alice: Any, settings: Any
) -> None:
    settings.ASK_USER_WARM_SERVER = False
    warm_server().stop()
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")

    in_workspace, events = _ask_and_answer(client, project.pk)

    assert warm_server().pid is None
    # The CLI's own child serves the tools (no stub, nothing forked from a warm server).
    [server] = [seen for seen in in_workspace if seen.cmdline[1:] == ["-P", "-m", "mcp_server"]]
    assert not any("mcp_server.warm" in seen.cmdline for seen in in_workspace)
    assert server.parent in {seen.pid for seen in in_workspace}
    assert tool_results(events) == [{"text": "User selected: PostgreSQL", "is_error": False}]


@pytest.mark.asyncio
async def test_a_killed_warm_server_is_replaced_on_the_same_socket_and_one_for_old_configs_is_not_kept(
    settings: Any, tmp_path: Path
) -> None:
    settings.RUN_SECRETS_DIR = tmp_path / "secrets-a"
    server = WarmServer()
    try:
        hold = server.acquire()
        first = server.pid
        assert hold is not None and first is not None
        path = hold.socket_path
        os.kill(first, signal.SIGKILL)
        await asyncio.to_thread(wait_until, lambda: first not in live_parents(), timeout=10, what="the kill")

        assert (again := server.acquire()) is not None and again.socket_path == path
        second = server.pid
        assert second is not None and second != first

        # The run secrets moved (a changed setting): a server that would refuse them goes.
        settings.RUN_SECRETS_DIR = tmp_path / "secrets-b"
        assert (moved := server.acquire()) is not None and moved.socket_path == path
        third = server.pid
        assert third is not None and third != second
        # Read once its exec is through (a process being exec'd shows an empty command line).
        await asyncio.to_thread(wait_until, lambda: bool(_cmdline(third)), timeout=10, what="the exec")
        assert _cmdline(third)[_cmdline(third).index("--allowed") + 1] == str(tmp_path / "secrets-b")
    finally:
        server.stop()
    assert server.pid is None
    assert not Path(path).parent.exists()


@pytest.mark.asyncio
async def test_a_hold_left_from_before_a_shutdown_does_not_keep_the_next_warm_server_from_its_idle_stop(
    settings: Any, tmp_path: Path
) -> None:
    settings.RUN_SECRETS_DIR = tmp_path / "secrets"
    settings.ASK_USER_WARM_IDLE_SECONDS = 1
    server = WarmServer()
    try:
        stale = server.acquire()  # a run whose clean-up comes after the shutdown, or never
        assert stale is not None
        server.stop()  # the worker's shutdown

        hold = server.acquire()
        assert hold is not None and hold.generation != stale.generation
        started = server.pid
        # The late clean-up lets go of nothing the new run holds: no idle stop under it.
        server.release(stale)
        await asyncio.sleep(1.5)
        assert server.pid == started
        # And the stale hold, never let go at all, does not keep the idle stop away.
        server.release(hold)
        await asyncio.to_thread(wait_until, lambda: server.pid is None, timeout=10, what="the idle stop")
        assert not Path(hold.socket_path).parent.exists()
    finally:
        server.stop()
