"""Plain helpers shared by tests (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import redis

from core.tool_names import MCP_ASK_USER

if TYPE_CHECKING:
    from promptmgr.engines.permissions import PermissionGate
    from tests.conftest import LiveServer


Message = dict[str, Any]


def http_scope(path: str, method: str = "GET", headers: list[tuple[bytes, bytes]] | None = None) -> Message:
    """An ASGI HTTP scope as uvicorn makes it, for the test host."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver"), *(headers or [])],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


async def asgi_request(
    app: Callable[[Message, Any, Any], Awaitable[None]],
    scope: Message,
    body: bytes = b"",
    on_send: Callable[[Message], Awaitable[None]] | None = None,
) -> list[Message]:
    """One request through ``app`` as an ASGI server makes it, the client staying connected;
    the messages the app sent (``on_send`` sees each as it is sent)."""
    sent: list[Message] = []
    body_read = False
    never = asyncio.Event()

    async def receive() -> Message:
        nonlocal body_read
        if not body_read:
            body_read = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if on_send is not None:
            await on_send(message)

    await app(scope, receive, send)
    return sent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class PrivateRedis:
    """A redis-server of one test's own, which it can stop (or kill) and start again with
    the same data; the ``private_redis`` fixture points the app at it."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is installed by make test"
        self.port = free_port()
        self.argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(workdir)]
        # Every write on disk before it is acknowledged: the restart loses nothing.
        self.argv += ["--save", "", "--appendonly", "yes", "--appendfsync", "always"]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL)
        wait_until(self.answers, timeout=10, what="the private redis-server")

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()  # SIGTERM: Redis shuts down cleanly, its append-only file complete
        self.proc.wait(timeout=10)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: Redis dies mid-work, as in a crash (what it had not written is lost)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """Stopped for the block's length, started again even if the block fails."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False


def make_project(*, owner: Any, members: tuple[Any, ...] = (), sync: bool = True, **fields: Any) -> Any:
    """A project with its workspace generated, as the app would leave it."""
    from promptmgr.models import Project
    from promptmgr.workspaces import workspace_sync

    fields.setdefault("name", "Test project")
    project = Project.objects.create(owner=owner, **fields)
    if members:
        project.members.add(*members)
    if sync:
        workspace_sync(project=project)
    return project


def run_workdir(run_id: int) -> Path:
    """Where a run works: its conversation's git worktree (``Run.workdir``)."""
    from promptmgr.models import Run

    return Path(Run.objects.get(pk=run_id).workdir)


def open_conversation(project: Any, user: Any) -> tuple[int, Path]:
    """A conversation with its worktree made, as its first prompt would make it: for tests
    that put files in place before Claude starts. Returns its id and the worktree."""
    from promptmgr.models import Conversation
    from promptmgr.services.worktrees import conversation_worktree_ensure

    conversation = Conversation.objects.create(project=project, user=user, title="Opened by the test")
    return conversation.pk, conversation_worktree_ensure(conversation)


def make_run(*, owner: Any, project: Any = None, status: str = "running", title: str = "") -> Any:
    """A run row in a new conversation (no CLI): for tests of the question store and the like."""
    from promptmgr.models import Conversation, Run

    conversation = Conversation.objects.create(
        project=project or make_project(owner=owner), user=owner, title=title
    )
    return Run.objects.create(conversation=conversation, user=owner, prompt="p", status=status)


async def owned_run(owner: Any, *, members: tuple[Any, ...] = (), **project_fields: Any) -> Any:
    """``make_run`` in a new project, owned by this process as a run supervised here is: an
    answer or a decision for a run nobody owns fails the run (the orphan check)."""
    from asgiref.sync import sync_to_async

    from promptmgr import live
    from promptmgr.runner import WORKER_ID

    project = await sync_to_async(make_project)(owner=owner, members=members, **project_fields)
    run = await sync_to_async(make_run)(owner=owner, project=project)
    await live.set_owner(run.pk, WORKER_ID, ttl=60)
    return run


# A one-question form in the shape both engines store.
PROCEED = {
    "question": "Proceed?",
    "header": "",
    "options": [{"label": "Yes", "description": ""}, {"label": "No", "description": ""}],
    "multiSelect": False,
}
BASH_CALL = {"command": "npm test", "description": "Run the tests"}
# What Claude gets for BASH_CALL allowed always: the call, and the rule for the rest of its turn.
BASH_CALL_ALWAYS_RESULT = {
    "behavior": "allow",
    "updatedInput": BASH_CALL,
    "updatedPermissions": [
        {
            "type": "addRules",
            "rules": [{"toolName": "Bash", "ruleContent": "npm test:*"}],
            "behavior": "allow",
            "destination": "session",
        }
    ],
}


async def open_question(run: Any, source: str = "mcp") -> str:
    """``PROCEED`` asked in ``run`` (300 s to answer); the question's id."""
    from askuser import asking
    from askuser.models import QuestionSource
    from core.questions import QuestionSpec

    card = await asking.question_create(
        run_id=run.pk,
        source=QuestionSource(source),
        questions=[QuestionSpec.model_validate(PROCEED)],
        timeout=300,
    )
    return str(card["question_id"])


async def ask_permission(
    run: Any,
    tool_name: str = "Bash",
    tool_input: dict[str, Any] | None = None,
    *,
    tool_use_id: str = "",
    call_key: str = "",
) -> str:
    """A tool call of ``run`` that waits for a person (``BASH_CALL`` unless told); its request id.
    Each call is a tool call of its own (a new ``tool_use_id`` unless told); the same
    ``call_key`` asked again is the same request (``permission_asking._create``)."""
    from askuser import permission_asking
    from askuser.models import QuestionSource

    created = await permission_asking.permission_request_create(
        run_id=run.pk,
        source=QuestionSource.MCP,
        tool_name=tool_name,
        tool_input=tool_input if tool_input is not None else BASH_CALL,
        tool_use_id=tool_use_id or f"toolu_{uuid.uuid4().hex[:12]}",
        call_key=call_key,
    )
    return str(created["request_id"])


def use_fake_cli(settings: Any, directory: Path, source: str, name: str = "fake-claude") -> Path:
    """Make every run start ``source`` (an executable script) instead of the real CLI."""
    import stat

    fake = directory / name
    fake.write_text(source)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    settings.CLAUDE_CLI_PATH = str(fake)
    return fake


def login_client(server: LiveServer, username: str, password: str) -> httpx.Client:
    """An httpx client holding a real session cookie and the CSRF token header."""
    client = httpx.Client(base_url=server.url, timeout=30, follow_redirects=False)
    page = client.get("/accounts/login/")
    token = page.cookies.get("csrftoken") or client.cookies.get("csrftoken")
    response = client.post(
        "/accounts/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{server.url}/accounts/login/"},
    )
    assert response.status_code == 302, f"login failed for {username}: {response.status_code}"
    client.headers["X-CSRFToken"] = client.cookies.get("csrftoken") or ""
    client.headers["Referer"] = f"{server.url}/"
    return client


def browser_login(page: Any, server: LiveServer, username: str, password: str) -> None:
    page.goto(f"{server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url(f"{server.url}/projects/")


class SSEEvent:
    def __init__(self, id: int, event: str, data: Any) -> None:
        self.id, self.event, self.data = id, event, data

    def __repr__(self) -> str:
        return f"SSEEvent({self.id}, {self.event!r}, {self.data!r})"


def read_sse(
    client: httpx.Client,
    url: str,
    *,
    until: Callable[[SSEEvent], bool] | None = None,
    last_event_id: int | None = None,
    timeout: float = 60,
) -> list[SSEEvent]:
    """Read SSE events until ``until`` says stop (default: the ``done`` event)."""
    import json as _json

    stop = until or (lambda e: e.event == "done")
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    events: list[SSEEvent] = []
    deadline = time.monotonic() + timeout
    with client.stream("GET", url, headers=headers, timeout=httpx.Timeout(timeout, read=timeout)) as response:
        assert response.status_code == 200, response.read()
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                raise TimeoutError(f"SSE: no stop event within {timeout}s; got {events}")
            if line == "":
                if "event" in fields:
                    event = SSEEvent(
                        int(fields["id"]), fields["event"], _json.loads(fields.get("data", "null"))
                    )
                    events.append(event)
                    if stop(event):
                        return events
                fields = {}
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
    return events


def script(*steps: dict[str, Any]) -> str:
    """A prompt that makes the scripted model play these steps."""
    import json as _json

    return "SCRIPT: " + _json.dumps(list(steps))


# --- Runs and questions over the real HTTP stack -----------------------------------------

ASK_USER_TOOL = MCP_ASK_USER
QUOTE = {"quote_tool_results": True}
SLOW_TEXT = {"text": "x" * 300, "pace_ms": 100, "chunk_chars": 1}


def ask(
    question: str, options: list[str] | None = None, multi: bool = False, header: str = ""
) -> dict[str, Any]:
    """A scripted step calling the ask-user MCP tool (the CLI engine's way to ask)."""
    tool_input: dict[str, Any] = {"question": question, "multiSelect": multi}
    if options is not None:
        tool_input["options"] = [{"label": o, "description": f"about {o}"} for o in options]
    if header:
        tool_input["header"] = header
    return {"tool_use": {"name": ASK_USER_TOOL, "input": tool_input}}


def start_run(
    client: httpx.Client, project_id: int, prompt: str, conversation_id: int | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": prompt}
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    response = client.post(f"/api/projects/{project_id}/runs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def next_question(client: httpx.Client, url: str, after: int = 0) -> SSEEvent:
    return read_sse(client, url, until=lambda e: e.event == "ask_user_question", last_event_id=after)[-1]


def submit_answer(client: httpx.Client, question_id: str, **body: Any) -> httpx.Response:
    return client.post("/api/askuser/submit-answer", json={"question_id": question_id, **body})


def tool_results(events: list[SSEEvent]) -> list[dict[str, Any]]:
    """The tool results the scripted model says it received (its ``quote_tool_results`` step)."""
    import json as _json

    [final] = [
        e.data["text"]
        for e in events
        if e.event == "assistant_text" and "Tool results received: " in e.data["text"]
    ]
    return list(_json.loads(final.split("Tool results received: ", 1)[1]))


def processes_in(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory`` (the CLI and its MCP server)."""
    import os

    from promptmgr.processes import live_processes

    found = []
    for process in live_processes():
        try:
            if os.readlink(f"/proc/{process.pid}/cwd") == str(directory):
                found.append(process.pid)
        except OSError:
            continue
    return found


class HeldEnd:
    """The run's end waits, in its end snapshot, until the test lets it go."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from promptmgr.services import changes

        self.reached = threading.Event()
        self.release = threading.Event()
        record_end = changes.record_end

        async def held(run_id: int) -> dict[str, Any] | None:
            self.reached.set()
            for _ in range(600):
                if self.release.is_set():
                    break
                await asyncio.sleep(0.05)
            recorded: dict[str, Any] | None = await record_end(run_id)
            return recorded

        # The runner calls it through the module (``run_changes.record_end``).
        monkeypatch.setattr(changes, "record_end", held)

    def wait(self) -> None:
        assert self.reached.wait(30), "the run never reached its end"


def kill_the_cli(run_id: int) -> None:
    """SIGKILL the run's CLI, as a crash would."""
    import os
    import signal

    # The CLI's guardian leads the run's process group; the ask-user server forked from the
    # warm server leads a session of its own in the workspace too, and is not the CLI.
    [cli_pid] = [
        p
        for p in processes_in(run_workdir(run_id))
        if os.getpgid(p) == p and b"mcp_server.warm" not in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    os.kill(cli_pid, signal.SIGKILL)


def live_parents() -> dict[int, int]:
    """Every live process (a zombie has finished) with its parent's pid."""
    from promptmgr.processes import live_processes

    return {process.pid: process.ppid for process in live_processes()}


# A Bash command that waits, and the rule that allows it. The CLI refuses a standalone
# `sleep N`, and outside Claude Code's own sandbox (the run sandbox's scope) it asks about
# inline code such as `python3 -c` whatever the rules say, so it is a module's command.
WAIT_RULE = "Bash(python3 -m timeit:*)"


def wait_command(seconds: float) -> str:
    return f"python3 -m timeit -n 1 -r 1 -s 'import time' 'time.sleep({seconds})'"


def allow_in_workspace(project: Any, *rules: str) -> None:
    """Add permission rules the way a user would, next to the generated ones."""
    import json as _json

    from promptmgr.workspaces import workspace_path

    path = workspace_path(project) / ".claude" / "settings.local.json"
    data = _json.loads(path.read_text())
    data["permissions"]["allow"] += list(rules)
    path.write_text(_json.dumps(data))


# How long a page test waits for something to appear, for Playwright's actions and its
# expect() alike (expect's own default is 5 s). A run's first event comes after the CLI and
# its ask-user server have started: about 3 s alone here, 6 s with two test workers sharing
# 2 cores. Passing waits end as soon as the page is right; speed is the benchmarks' job.
PAGE_WAIT_MS = 15_000


def new_context(browser: Any, **options: Any) -> Any:
    """A browser context whose actions, and every expect(), wait up to PAGE_WAIT_MS."""
    from playwright.sync_api import expect

    expect.set_options(timeout=PAGE_WAIT_MS)
    context = browser.new_context(**options)
    context.set_default_timeout(PAGE_WAIT_MS)
    return context


async def _nothing_to_catch_up() -> None:
    return None


def sdk_gate(run_id: int) -> PermissionGate:
    """The SDK engine's ``can_use_tool`` gate of a run in the default mode with ask-user on,
    with no supervisor ahead of it (nothing to catch up on before a card)."""
    from promptmgr.engines.permissions import PermissionGate

    return PermissionGate(
        run_id=run_id,
        permission_mode="default",
        ask_user=True,
        stopping=asyncio.Event(),
        caught_up=_nothing_to_catch_up,
    )
