"""Tool-approval latency: Claude's tool call -> the card in the browser, and the person's
decision -> the tool running, on the CLI engine and on the SDK engine.

Run: ``.venv/bin/python bench/approval_latency.py [--engine cli|sdk|both] [--rounds 40]``.

Per engine, one real run in a project with ``permission_mode="default"``: the scripted model
makes the bundled Claude Code CLI call Bash ``--rounds`` times in a row. The CLI engine asks
``mcp__ask-user__approve`` (``--permission-prompt-tool``), which relays to the app under
uvicorn (Redis, SQLite); the SDK engine asks ``can_use_tool`` over the SDK's control protocol.
This process is the browser: it reads the run's SSE stream and allows every
``permission_request`` card after ``--think-ms`` (so the waiting side is parked when the
decision comes, as with a person): every other one over the page's click channel (a
WebSocket, ``app_client.ClickSocket``), the rest through ``POST /api/askuser/submit-decision``
(session + CSRF, the page's fallback, on a bare kept-alive socket as a browser's native
client would: ``app_client.Clicks``). The targets are judged on the channel's rounds; the
endpoint's are shown beside them.

1. tool call -> card: from the moment the CLI asks for permission to the
   ``permission_request`` event at this SSE client. The CLI engine asks through the approve
   ``tools/call`` (read by ``mcp_tee.py`` as it reaches our MCP server), the SDK engine
   through the ``can_use_tool`` control request (stamped by the tee as it leaves the CLI's
   stdout). This is where the question path's figure starts too (the ask_user
   ``tools/call``), so the two compare. Before it, the CLI spends time of its own between
   printing Claude's finished call (the ``tool_use`` line, stamped by ``cli_tee.py``:
   ``CLAUDE_CLI_PATH`` points at the shim of ``stream_passes``) and asking, evaluating its
   permission rules; that figure, ``tool_use`` line -> card, is shown beside it. The card
   itself says when the app stored the request (``expires_at`` - ``timeout``), which splits
   our share into reaching the app and reaching the browser.
2. decision -> tool running: from sending the decision to the Bash command's first
   instant. Each command is ``date +%s%N > approval-NNN.stamp``: ``date`` is a small C
   program that reads the clock as its first work (a whole ``date`` run, fork to exit, took
   under 2 ms here) and writes afterwards, so the stamp is when the command started, not
   when its output was seen. (``python3 -c 'print(time.time_ns())'`` reads its clock only
   after the interpreter's start-up, 120-240 ms on this busy 2-core machine; a touched
   file's mtime comes from the kernel's coarse clock, which moves once per jiffy.) The
   redirect makes it a write, so the CLI asks before running it; a bare ``date +%s%N`` is
   read-only to the CLI and ran unasked when tried. ``date`` prints CLOCK_REALTIME:
   the decision is stamped on both clocks back to back and the command's stamp is moved
   onto CLOCK_MONOTONIC (shared with the tees) by that pair's offset. The
   ``permission_decided`` event says when the app stored the decision (``decided_at``), and
   on the CLI engine the approve tool's result (``mcp_tee.py``) marks where our relay ends
   and the CLI's own share begins (reading the result, starting the shell, ``date``).

Claude's tools run in the sandbox by default, so (2) then includes entering it: in the
default ``run`` scope each command joins the run's own sandbox (about 7 ms); with
``CLAUDE_SANDBOX_SCOPE=command`` Claude Code builds a new sandbox for each command (about
65 ms); ``CLAUDE_SANDBOX=off`` measures the approval path alone. ``make bench`` runs all three.

``--tap-relay`` also passes the MCP server's calls to the app through ``http_tee.py`` (the
app's ``INTERNAL_BASE_URL``), which stamps relay-permission reaching the app and the deciding
poll-decision reply leaving it: that splits the approve tool's own share from the app's, at
the cost of one more loopback hop each way, so the headline figures are taken without it.

For comparison the question path of ``askuser_latency`` is measured in the same stack
(``--question-rounds``, 0 to skip). If an engine never shows a card for the Bash call
(the SDK engine before its ``can_use_tool`` is wired to the approvals store), that engine
fails loudly, no figure is printed for it, and the benchmark exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import app_client, askuser_latency, harness  # noqa: E402
from bench.report import LATENCY_HEADERS, fmt, latency_row, percentile, table, verdict  # noqa: E402
from bench.stream_passes import cpu_jiffies, read_stamps, write_shim  # noqa: E402

HTTP_TEE = Path(__file__).resolve().parent / "http_tee.py"
ENGINES = ("cli", "sdk")
COMMAND = "date +%s%N > approval-{index:03d}.stamp"
ROUND = re.compile(r"approval-(\d+)\.stamp")
TARGET_CARD_MS = 10.0
TARGET_RUNNING_MS = 20.0
TARGET_ACK_MS = 3.0
ASKED_BY = {"cli": "approve tools/call", "sdk": "can_use_tool request"}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class EngineFailed(RuntimeError):
    """The engine's run gave nothing to measure (no card for the tool call, or no end)."""


@dataclass
class Timeline:
    """Per round (the command's index), when each moment happened, CLOCK_MONOTONIC ns."""

    marks: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    rounds_by_id: dict[str, int] = field(default_factory=dict)  # tool_use id -> round
    rounds_by_request: dict[str, int] = field(default_factory=dict)  # request_id -> round
    # The rounds whose decision went over the page's click channel; the others through submit-decision.
    over_channel: set[int] = field(default_factory=set)

    def ms(self, start: str, end: str, channel: bool | None = None) -> list[float]:
        """``end - start`` per round (ms); with ``channel``, only the rounds decided over the
        click channel (True) or through the endpoint (False)."""
        first, then = self.marks[start], self.marks[end]
        return [
            (then[i] - first[i]) / 1e6
            for i in sorted(first)
            if i in then and (channel is None or (i in self.over_channel) == channel)
        ]


def sandbox_state() -> str:
    """The app's sandbox as this run had it: entering it is part of (2)."""
    off = os.environ.get("CLAUDE_SANDBOX", "").strip().lower() in {"0", "false", "no", "off"}
    if off:
        return "without the sandbox (CLAUDE_SANDBOX=off)"
    scope = os.environ.get("CLAUDE_SANDBOX_SCOPE", "").strip().lower() or "run"
    if scope == "run":
        return "in the run's own sandbox, which each command enters (CLAUDE_SANDBOX_SCOPE=run, the default)"
    return "in Claude Code's own sandbox, a new one per command (CLAUDE_SANDBOX_SCOPE=command)"


def iso_ns(value: str) -> int:
    """An ISO 8601 time from the app (CLOCK_REALTIME) in ns, without a float's rounding."""
    return (datetime.fromisoformat(value) - EPOCH) // timedelta(microseconds=1) * 1000


def round_of(command: str) -> int:
    match = ROUND.search(command)
    if match is None:
        raise RuntimeError(f"a Bash call the benchmark did not script: {command!r}")
    return int(match.group(1))


def bash_steps(rounds: int) -> list[dict[str, Any]]:
    calls = [
        {"tool_use": {"name": "Bash", "input": {"command": COMMAND.format(index=i), "description": "Stamp"}}}
        for i in range(rounds)
    ]
    return [*calls, {"text": "All ran."}]


async def run_engine(
    stack: harness.Stack, project_id: int, conversation_id: int, engine: str, rounds: int, think_ms: float
) -> Timeline:
    """One run of ``rounds`` Bash calls, each allowed by a click; what the SSE
    client saw, and the app's own stamps from the cards and decisions."""
    timeline = Timeline()
    marks, ids, requests = timeline.marks, timeline.rounds_by_id, timeline.rounds_by_request
    client = await app_client.login(stack.app_url)
    # The decisions leave as the page sends them: over its click channel (app_client.ClickSocket)
    # every other round, through submit-decision (its fallback) as a browser's native fetch
    # sends it (app_client.Clicks) the rest, so both ways are measured in one run.
    clicks = app_client.Clicks(stack.app_url, client)
    channel = app_client.ClickSocket(stack.app_url, client)
    await channel.connect()

    async def allow(request_id: str, index: int) -> None:
        body = {"request_id": request_id, "decision": "allow"}
        reply: Any
        await asyncio.sleep(think_ms / 1000)
        marks["submit"][index], marks["submit_real"][index] = harness.now_ns(), time.time_ns()
        if index % 2 == 1:
            timeline.over_channel.add(index)
            status, reply = await channel.click("decision", body)
        else:
            status, reply = await clicks.post("/api/askuser/submit-decision", body)
        marks["submit_done"][index] = harness.now_ns()
        if status != 200:
            raise EngineFailed(f"submit-decision: {status} {str(reply)[:300]}")

    def on_event(event: app_client.SSEEvent, group: asyncio.TaskGroup) -> str | None:
        """Note what ``event`` says; the run's status once it is done."""
        data = event.data
        if event.event == "tool_use" and data.get("name") == "Bash":
            index = ids[str(data["id"])] = round_of(str(data["input"]["command"]))
            marks["tool_use_sse"][index] = event.ts_ns
        elif event.event == "permission_request":
            index = ids.get(str(data.get("tool_use_id")), -1)
            index = index if index >= 0 else round_of(str((data.get("input") or {}).get("command")))
            marks["card"][index] = event.ts_ns
            # The app's own clock: the request was stored `timeout` seconds before it expires.
            stored = iso_ns(str(data["expires_at"])) - int(data["timeout"]) * 1_000_000_000
            marks["stored_real"][index] = stored
            requests[str(data["request_id"])] = index
            group.create_task(allow(str(data["request_id"]), index))
            if len(marks["card"]) % 10 == 0:
                print(f"  {engine}: {len(marks['card'])}/{rounds} approvals …", flush=True)
        elif event.event == "permission_decided" and data.get("request_id") in requests:
            marks["decided_real"][requests[str(data["request_id"])]] = iso_ns(str(data["decided_at"]))
        elif event.event == "tool_result" and data.get("tool_use_id") in ids:
            index = ids[str(data["tool_use_id"])]
            content = str(data.get("content"))[:300]
            if index not in marks["card"]:
                raise EngineFailed(
                    f"Bash call {index} ended without a permission_request card (its result: {content!r}):"
                    f" the {engine} engine does not put this tool call through the approvals store,"
                    " so there is nothing to measure"
                )
            if data.get("is_error"):
                raise EngineFailed(f"the allowed Bash call {index} failed: {content!r}")
            marks["tool_result_sse"][index] = event.ts_ns
        elif event.event == "done":
            return str(data.get("status"))
        return None

    url, status = "", None
    try:
        url = await app_client.start_run(
            client, project_id, app_client.script_prompt(bash_steps(rounds)), conversation_id
        )
        async with (
            asyncio.timeout(60 + 5 * rounds),
            asyncio.TaskGroup() as group,
            contextlib.aclosing(app_client.sse_events(client, url, timeout=60)) as events,
        ):
            async for event in events:
                if status := on_event(event, group):
                    break
        done = len(marks["tool_result_sse"])
        if status != "completed" or done != rounds:
            reason = await app_client.run_error(client, url)
            raise EngineFailed(f"the run ended after {done}/{rounds} tool calls: {reason}")
    except TimeoutError:
        cards = len(marks["card"])
        raise EngineFailed(f"timed out waiting, after {cards}/{rounds} permission_request cards") from None
    except ExceptionGroup as grouped:
        # The TaskGroup wraps what its body or a decision raised: pass ours on as itself.
        failed = grouped.subgroup(EngineFailed)
        if failed is None:
            raise
        if url:
            await client.post(url.removesuffix("/events") + "/cancel")
        raise EngineFailed("; ".join(map(str, failed.exceptions))) from None
    finally:
        await clicks.aclose()
        await channel.aclose()
        await client.aclose()
    return timeline


def read_taps(timeline: Timeline, cli_stamps: Path, mcp_stamps: Path, workspace: Path) -> None:
    """The tees' stamps and the commands' own, onto the rounds (by tool_use id or file name)."""
    marks, ids = timeline.marks, timeline.rounds_by_id
    for token, ns in read_stamps(cli_stamps).items():
        kind, _, tool_use_id = token.decode().partition(":")
        if tool_use_id in ids and kind in ("tool_use", "can_use_tool"):
            marks["tool_use_line" if kind == "tool_use" else "asked"][ids[tool_use_id]] = ns
    calls: dict[Any, int] = {}  # JSON-RPC id -> round
    lines = mcp_stamps.read_text().splitlines() if mcp_stamps.exists() else []
    for record in map(json.loads, lines):
        if record.get("tool") != "approve":
            continue
        if record["kind"] == "call" and record.get("tool_use_id") in ids:
            calls[record["id"]] = index = ids[record["tool_use_id"]]
            marks["asked"][index] = int(record["ns"])
        elif record["kind"] == "result" and record["id"] in calls:
            marks["approved"][calls[record["id"]]] = int(record["ns"])
    for stamp in workspace.glob("approval-*.stamp"):
        if text := stamp.read_text().strip():
            marks["running_real"][round_of(stamp.name)] = int(text)
    # CLOCK_REALTIME onto CLOCK_MONOTONIC by each round's pair of stamps taken with the decision.
    offsets = {i: marks["submit"][i] - real for i, real in marks["submit_real"].items()}
    for name in ("stored", "decided", "running"):
        real = marks[f"{name}_real"]
        marks[name] = {i: ns + offsets[i] for i, ns in real.items() if i in offsets}


def read_relay_tap(timeline: Timeline, path: Path) -> None:
    """http_tee's stamps: relay-permission reaching the app, and the deciding poll's reply.

    A relay-permission call is followed by its polls on the same connection, whose query
    names the request; the last poll reply is the one that carried the decision.
    """
    marks, requests = timeline.marks, timeline.rounds_by_request
    relayed: dict[int, int] = {}  # connection -> when its latest relay-permission arrived
    current: dict[int, str] = {}  # connection -> the request_id its latest poll asked about
    lines = path.read_text().splitlines() if path.exists() else []
    for record in map(json.loads, lines):
        conn, ns = int(record["conn"]), int(record["ns"])
        if record["kind"] == "request":
            url = urlsplit(str(record["target"]))
            current.pop(conn, None)
            if url.path.endswith("/relay-permission"):
                relayed[conn] = ns
            elif url.path.endswith("/poll-decision"):
                request_id = parse_qs(url.query).get("request_id", [""])[0]
                if (index := requests.get(request_id)) is not None:
                    current[conn] = request_id
                    if conn in relayed:
                        marks["relay_sent"][index] = relayed.pop(conn)
        elif conn in current:
            marks["poll_replied"][requests[current[conn]]] = ns


@dataclass
class Results:
    engines: dict[str, Timeline] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    questions: askuser_latency.Ours | None = None
    cpu: dict[str, str] = field(default_factory=dict)  # per engine: how busy the machine was


def cpu_note(before: tuple[int, int, int]) -> str:
    busy, total, stolen = cpu_jiffies()
    span = max(1, total - before[1])
    return f"machine CPU busy {(busy - before[0]) / span:.0%}, stolen {(stolen - before[2]) / span:.0%}"


# Each path as a chain of moments: the first to the last is the figure, each link one share of it.
CARD_CHAIN = [
    ("tool_use_line", "tool_use line leaves the CLI"),
    ("asked", "{asked} (the CLI's share ends)"),
    ("relay_sent", "relay-permission reaches the app"),
    ("stored", "request stored in the app"),
    ("card", "card at the SSE client"),
]
RUNNING_CHAIN = [
    ("submit", "decision sent"),
    ("decided", "decision stored in the app"),
    ("poll_replied", "poll-decision reply leaves the app"),
    ("approved", "approve returns to the CLI"),
    ("running", "command starts"),
]


def chain_rows(
    engine: str, t: Timeline, chain: list[tuple[str, str]], channel: bool | None = None
) -> list[list[str]]:
    links = [(mark, label.format(asked=ASKED_BY[engine])) for mark, label in chain if t.marks[mark]]
    (first, first_label), (last, last_label) = links[0], links[-1]
    rows = [latency_row(f"{engine}: {first_label} -> {last_label}", t.ms(first, last, channel))]
    for (start, _), (end, label) in zip(links, links[1:], strict=False):
        rows.append(latency_row(f"{engine}:   -> {label}", t.ms(start, end, channel)))
    return rows


def report_engine(engine: str, t: Timeline) -> None:
    card_rows = [
        *chain_rows(engine, t, CARD_CHAIN),
        latency_row(
            f"{engine}: tool_use event -> card event, both at SSE (info)", t.ms("tool_use_sse", "card")
        ),
    ]
    running_rows = [
        *chain_rows(engine, t, RUNNING_CHAIN, channel=True),
        latency_row(f"{engine}: decision acknowledged (click channel)", t.ms("submit", "submit_done", True)),
        latency_row(
            f"{engine}: decision sent -> tool_result at SSE (info)", t.ms("submit", "tool_result_sse", True)
        ),
        latency_row(
            f"{engine}, endpoint: submit-decision -> command starts", t.ms("submit", "running", False)
        ),
        latency_row(
            f"{engine}, endpoint: submit-decision HTTP round trip", t.ms("submit", "submit_done", False)
        ),
    ]
    title = f"{engine} engine, (1) Claude calls the tool -> the card reaches the browser"
    print()
    print(table(LATENCY_HEADERS, card_rows, title=title))
    print()
    print(
        table(
            LATENCY_HEADERS,
            running_rows,
            title=f"{engine} engine, (2) the decision (over the click channel unless 'endpoint') -> the tool runs",
        )
    )


def report(results: Results, args: argparse.Namespace) -> None:
    for engine, timeline in results.engines.items():
        report_engine(engine, timeline)
        print(f"  {engine}: during its run, {results.cpu[engine]}")
    print(
        f"  {args.rounds} sequential Bash calls per engine in one real run, each allowed after {args.think_ms:g} ms.\n"
        "  (1) starts when the CLI asks for permission: approve tools/call (mcp_tee.py) or can_use_tool\n"
        "      request (stdout), as the question path starts at the ask_user tools/call. Before it, the\n"
        "      CLI spends its own time between printing the tool_use line and asking (shown apart).\n"
        "  (2) ends at the command's own first instant: `date +%s%N` (see the module docstring).\n"
        f"  Claude's tools ran {sandbox_state()}."
    )
    # (label, samples, target p50 or None for a figure shown beside the targets)
    rows: list[tuple[str, list[float], float | None]] = []
    for engine, t in results.engines.items():
        rows += [
            (f"{engine}: (1) tool call -> card, p50 <= 10 ms", t.ms("asked", "card"), TARGET_CARD_MS),
            (
                f"{engine}:     from the tool_use line (+ the CLI's own share)",
                t.ms("tool_use_line", "card"),
                None,
            ),
            (
                f"{engine}: (2) decision -> tool running, p50 <= 20 ms",
                t.ms("submit", "running", True),
                TARGET_RUNNING_MS,
            ),
        ]
        if t.marks["approved"]:
            rows.append(
                (f"{engine}:     of it submit -> approve returns", t.ms("submit", "approved", True), None)
            )
        rows += [
            (
                f"{engine}: decision ack (click channel), p50 <= 3 ms",
                t.ms("submit", "submit_done", True),
                TARGET_ACK_MS,
            ),
            (
                f"{engine}, endpoint: (2) submit-decision -> tool running",
                t.ms("submit", "running", False),
                None,
            ),
        ]
    if (ours := results.questions) is not None:
        rows += [
            (
                "question path (askuser): MCP tools/call -> card",
                ours.intervals(ours.mcp_call, ours.card),
                None,
            ),
            (
                "question path (askuser): tool_use event -> card",
                ours.intervals(ours.tool_use, ours.card),
                None,
            ),
            (
                "answer path (askuser): answer sent -> MCP tool returns",
                ours.intervals(ours.submit_sent, ours.mcp_result, channel=True),
                None,
            ),
        ]
    summary = [
        [
            label,
            fmt(percentile(samples, 50)),
            fmt(percentile(samples, 99)),
            "info" if limit is None else verdict(percentile(samples, 50), limit, inclusive=True),
        ]
        for label, samples, limit in rows
    ]
    summary += [[f"{engine}: no figures", "-", "-", "FAIL"] for engine in results.failures]
    print()
    print(
        table(
            ["target", "p50 ms", "p99 ms", "result"],
            summary,
            title="Summary (a benchmark reports; it does not assert)",
        )
    )
    for engine, reason in results.failures.items():
        print(f"\n{engine} ENGINE FAILED: {reason}", file=sys.stderr)


def prepare_project(stack: harness.Stack, engine: str) -> tuple[int, int, Path]:
    """A project that asks about every non-read-only command, and a conversation whose
    worktree (where the run works and the commands write their stamps) starts the CLI's
    MCP server under mcp_tee (the CLI engine's); returns the project, the conversation
    and the worktree."""
    from django.contrib.auth.models import User

    from promptmgr.services.projects import project_create

    owner = User.objects.get(username=harness.USERNAME)
    project = project_create(
        owner=owner, name=f"Approvals ({engine})", engine=engine, permission_mode="default"
    )
    conversation_id, worktree = askuser_latency.tee_conversation(project)
    return int(project.pk), conversation_id, worktree


async def measure(
    stack: harness.Stack,
    flag: Path,
    projects: dict[str, tuple[int, int, Path]],
    question_conversation: int,
    args: argparse.Namespace,
) -> Results:
    results = Results()
    for engine, (project_id, conversation_id, workspace) in projects.items():
        cli_stamps = stack.tmp / f"cli-stamps-{engine}.txt"
        flag.write_text(str(cli_stamps))
        stack.tee_mcp_to(stack.tmp / f"mcp-stamps-{engine}.jsonl")
        print(f"  {engine} engine: {args.rounds} approvals …", flush=True)
        before = cpu_jiffies()
        try:
            timeline = await run_engine(
                stack, project_id, conversation_id, engine, args.rounds, args.think_ms
            )
        except EngineFailed as exc:
            results.failures[engine] = f"{exc}. No figure is printed for the {engine} engine."
            print(f"  {engine} ENGINE FAILED: {results.failures[engine]}", file=sys.stderr, flush=True)
            continue
        read_taps(timeline, cli_stamps, stack.tmp / f"mcp-stamps-{engine}.jsonl", workspace)
        read_relay_tap(timeline, stack.tmp / "relay-stamps.jsonl")
        results.engines[engine] = timeline
        results.cpu[engine] = cpu_note(before)
    if args.question_rounds:
        flag.write_text(str(stack.tmp / "cli-stamps-questions.txt"))
        print(f"  question path (askuser_latency): {args.question_rounds} questions …", flush=True)
        stamps = stack.tmp / "mcp-stamps-questions.jsonl"
        stack.tee_mcp_to(stamps)
        results.questions = await askuser_latency.run_ours(
            stack, stamps, args.question_rounds, args.think_ms, question_conversation
        )
    return results


def start_relay_tap(stack: harness.Stack, stamps: Path) -> str:
    """http_tee.py in front of the app; returns the URL the MCP server should use."""
    port = harness.free_port()
    argv = [harness.PYTHON, str(HTTP_TEE), str(stamps), str(port), str(stack.app_port)]
    stack.children.start("http-tee", argv)

    def listening() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
        return False

    harness.wait_until(listening, timeout=15, what="http_tee.py")
    return f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--engine", choices=["cli", "sdk", "both"], default="both", help="engine(s) to measure"
    )
    parser.add_argument("--rounds", type=int, default=40, help="approval round trips per engine")
    parser.add_argument("--think-ms", type=float, default=200.0, help="pause before deciding each card")
    parser.add_argument(
        "--question-rounds", type=int, default=40, help="ask_user round trips for comparison (0: skip)"
    )
    parser.add_argument(
        "--tap-relay",
        action="store_true",
        help="pass the MCP server's calls to the app through http_tee.py, to split the figures further"
        " (adds a hop to them)",
    )
    args = parser.parse_args()
    engines = ENGINES if args.engine == "both" else (args.engine,)

    started = time.monotonic()
    print(f"Approval latency benchmark on {harness.machine()}; setting up a private stack …", flush=True)
    with harness.Stack.create(name="approval", ask_user=True, tee_mcp=True) as stack:
        from promptmgr.cli import find_claude_cli

        real_cli = find_claude_cli()
        shim, flag = write_shim(stack.tmp, real_cli)
        projects = {e: prepare_project(stack, e) for e in engines}
        question_conversation, _worktree = askuser_latency.tee_conversation(stack.project())
        env = {"CLAUDE_CLI_PATH": str(shim)}
        if args.tap_relay:
            env["INTERNAL_BASE_URL"] = start_relay_tap(stack, stack.tmp / "relay-stamps.jsonl")
        stack.start_app(env)
        print(f"  CLI: {real_cli} (under cli_tee.py)")
        print(
            f"  app {stack.app_url}, model {stack.model_url}, redis {stack.redis_url} (prefix {stack.key_prefix})"
        )
        results = asyncio.run(measure(stack, flag, projects, question_conversation, args))
    report(results, args)
    print(f"\nFinished in {time.monotonic() - started:.0f} s on {harness.machine()}.")
    print("Every process the benchmark started has been stopped.")
    if results.failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
