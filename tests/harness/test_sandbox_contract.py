"""The sandbox contract: what the bundled CLI does with the settings ``promptmgr.sandbox`` gives
every run, which the isolation of projects relies on, in both scopes where it applies: the
CLI's own sandbox per command (``command``, ``run_settings``) and the run's own sandbox
that every command enters (``run``, ``run_scope_settings`` and ``promptmgr.run_sandbox``).

Each test runs the real CLI against the scripted model in ``STORAGE_ROOT/projects/1``, with
the app's environment and the app's own sandbox settings on the command line (``--settings``),
beside canaries where another project, another project's session transcript, another run's
relay config and the app's other folders keep them. The contract MCP server's prompt tool
allows every call, as a person who approves everything would. A CLI upgrade that changes one
of these facts fails here.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from promptmgr import egress, run_sandbox, sandbox
from tests.harness import contract_mcp_server as contract
from tests.harness.test_cli_contract import (
    FILE_RULE_DENIED,
    PROMPT_TOOL,
    RULE_DENIED,
    CliRun,
    Workspace,
    bash,
    succeeded,
    tool_call,
)
from tests.helpers import QUOTE, wait_until
from tests.sandbox import test_egress as egress_tests

pytestmark = pytest.mark.e2e

SCOPES = ["command", "run"]
SERVER_COMMAND = [sys.executable, contract.__file__]
PROMPTED = ("--permission-mode", "default", "--permission-prompt-tool", PROMPT_TOOL)
READ_BLOCKED = (
    "the permissions.blockReadsOutsideWorkingDirectories setting blocks reads outside the working directories"
)
WRITE_BLOCKED = "the permissions.blockWritesOutsideWorkingDirectories setting blocks writes outside the working directories"
NO_SUCH_TOOL = "<tool_use_error>Error: No such tool available: {tool}."
SANDBOX_REQUIRED = "Error: sandbox required but unavailable:"
ALLOW_EVERYTHING = [
    {"tool_name": tool, "contains": "", "decision": {"behavior": "allow"}}
    for tool in ("Bash", "Read", "Write", "Edit", "Grep", "Glob")
]


@dataclass
class Layout:
    """A run's working directory and, around it, what other runs and the app keep."""

    workspace: Workspace
    own_file: Path
    other_context: Path
    transcript: Path
    relay_config: Path
    var_file: Path
    scratch_file: Path
    tmpdir: Path
    scope: str = "command"
    # The app's confinement of a run in the run scope (its sandbox, prefix and settings).
    run_scope: sandbox.Confinement | None = None

    @property
    def held(self) -> run_sandbox.RunSandbox | None:
        return self.run_scope.sandbox if self.run_scope is not None else None

    @property
    def root(self) -> Path:
        return self.workspace.root

    def private(self) -> list[Path]:
        """The places the file tools' deny rules name (``sandbox.private_places``)."""
        return [self.transcript, self.relay_config]

    def canaries(self) -> dict[Path, str]:
        return {
            path: path.read_text()
            for path in (
                self.other_context,
                self.transcript,
                self.relay_config,
                self.var_file,
                self.scratch_file,
            )
        }

    def confinement(self) -> dict[str, Any]:
        """The ``--settings`` the app gives a run in this layout's scope."""
        if self.run_scope is None:
            return sandbox.run_settings(workdir=self.root)
        assert self.run_scope.settings is not None
        return dict(json.loads(self.run_scope.settings))

    def run(self, *steps: dict[str, Any], args: tuple[str, ...] = PROMPTED, confined: bool = True) -> CliRun:
        if confined:
            args = (*args, "--settings", json.dumps(self.confinement()))
        return self.workspace.run(*steps, QUOTE, args=args)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(params=["command"])
def layout(
    request: pytest.FixtureRequest,
    model_settings: Any,
    claude_cli: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Layout]:
    """The layout in the CLI's per-command sandbox; a test that holds in both scopes says
    so with ``@pytest.mark.parametrize("layout", SCOPES, indirect=True)``."""
    scope = str(request.param)
    model_settings.VAR_DIR = tmp_path / "var"
    storage = Path(settings.STORAGE_ROOT)
    workspace = Workspace(storage / "projects" / "1", claude_cli)
    workspace.register_in_mcp_json()
    workspace.decide_by_table(*ALLOW_EVERYTHING)
    if scope == "run":
        # The contract server is this layout's prompt tool, as the ask-user server is the
        # app's: the one MCP server the prefix starts outside the sandbox.
        monkeypatch.setattr(sandbox, "trusted_command", lambda: shlex.join(SERVER_COMMAND))
        confinement = sandbox.run_scope_confinement(
            run_id=1, workdir=workspace.root, path=workspace.env["PATH"]
        )
    else:
        confinement = sandbox.Confinement(run_id=1, settings=None, tmpdir=sandbox.run_tmp_open(1))
    workspace.env.update(confinement.cli_env)
    # A server and a run of its own would set these; a sandboxed command must see neither.
    workspace.env["ASK_USER_CONFIG"] = str(Path(settings.RUN_SECRETS_DIR) / "run-1-aa" / "ask-user.json")
    layout = Layout(
        workspace=workspace,
        own_file=write(workspace.root / "mine.txt", "own-file-content"),
        other_context=write(storage / "projects" / "2" / "CLAUDE.local.md", "canary-other-project"),
        transcript=write(
            storage / "claude-home" / ".claude" / "projects" / "-other" / "s.jsonl", "canary-transcript"
        ),
        relay_config=write(
            Path(settings.RUN_SECRETS_DIR) / "run-2-bb" / "ask-user.json", "canary-relay-config"
        ),
        var_file=write(tmp_path / "var" / "state.txt", "canary-var-dir"),
        scratch_file=write(tmp_path / "scratch" / "note.txt", "canary-scratch"),
        tmpdir=confinement.tmpdir,
        scope=scope,
        run_scope=confinement if scope == "run" else None,
    )
    yield layout
    confinement.close()


def texts(run: CliRun) -> list[str]:
    return [str(result["text"]) for result in succeeded(run).model_received()]


def assert_no_canary(layout: Layout, results: list[str]) -> None:
    joined = "\n".join(results)
    leaked = [text for text in layout.canaries().values() if text in joined]
    assert leaked == [], joined


@pytest.mark.parametrize("layout", SCOPES, indirect=True)
def test_a_sandboxed_command_reads_its_working_directory_and_nothing_of_the_denied_regions(
    layout: Layout,
) -> None:
    app_file = Path(settings.BASE_DIR) / "README.md"
    targets = [layout.own_file, *layout.canaries(), app_file]
    results = texts(layout.run(*(bash(f"cat {path}") for path in targets)))
    assert results[0] == "own-file-content"
    for path, result in zip(targets[1:], results[1:], strict=True):
        if path in layout.private():
            # The deny rules hold a command that names a private place, before anyone is asked.
            assert result == RULE_DENIED.format(command=f"cat {path}")
        else:
            assert result.startswith("Exit code 1\ncat: "), result
            assert result.endswith(("No such file or directory", "Permission denied")), result
    assert_no_canary(layout, results)
    assert "PromptManager" not in "\n".join(results)


@pytest.mark.parametrize("layout", SCOPES, indirect=True)
def test_a_recursive_grep_of_the_whole_scratch_region_finds_nothing_of_the_others(layout: Layout) -> None:
    # /tmp holds the test's storage, the relay configs and the scratch file; it is denied
    # but for the working directory, where the grep finds its own mention of the word.
    (layout.root / "notes.txt").write_text("no canary here")
    [result] = texts(layout.run(bash("grep -rls canary /tmp; echo searched")))
    assert result.splitlines() == [str(layout.root / "notes.txt"), "searched"]


@pytest.mark.parametrize("layout", SCOPES, indirect=True)
def test_a_sandboxed_command_writes_only_in_its_working_directory(layout: Layout) -> None:
    outside = layout.other_context.parent / "planted.txt"
    results = texts(layout.run(bash("touch inside.txt"), bash(f"touch {outside}")))
    assert results[0] == "(Bash completed with no output)"
    assert results[1].startswith("Exit code 1\ntouch: cannot touch"), results[1]
    assert (layout.root / "inside.txt").exists()
    assert not outside.exists()


@pytest.mark.parametrize("layout", SCOPES, indirect=True)
def test_a_sandboxed_command_sees_only_its_own_processes(layout: Layout) -> None:
    me = os.getpid()
    [result] = texts(
        layout.run(bash(f"test -e /proc/{me} && echo visible || echo hidden; ls /proc | grep -c '^[0-9]'"))
    )
    hidden, count = result.splitlines()
    assert hidden == "hidden"
    # bwrap, the shell and the commands of this line: a handful, never the server's.
    assert int(count) < 20


@pytest.mark.parametrize("layout", SCOPES, indirect=True)
def test_a_sandboxed_command_gets_neither_the_api_key_nor_ask_user_config(layout: Layout) -> None:
    assert layout.workspace.env["ANTHROPIC_API_KEY"]
    [result] = texts(layout.run(bash("printenv ANTHROPIC_API_KEY ASK_USER_CONFIG; echo end")))
    assert result.endswith("end")
    assert layout.workspace.env["ANTHROPIC_API_KEY"] not in result
    assert "ask-user.json" not in result


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's loopback, as Redis and the app listen; it logs whoever connects."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    connected: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            connected.append(str(peer))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1]), connected
    stop.set()
    thread.join(timeout=5)
    server.close()


def test_the_servers_loopback_is_out_of_reach_even_through_the_sandbox_proxy(
    layout: Layout, loopback_server: tuple[int, list[str]]
) -> None:
    port, connected = loopback_server
    confinement = sandbox.run_settings(workdir=layout.root)
    # Even a project rule that allows the address cannot open it: deniedDomains wins.
    confinement["sandbox"]["network"]["allowedDomains"] = [f"127.0.0.1:{port}", f"localhost:{port}"]
    direct = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\""
    proxied = f"curl -sS -m 5 --noproxy '' http://127.0.0.1:{port}/"
    run = layout.workspace.run(
        bash(direct), bash(proxied), QUOTE, args=(*PROMPTED, "--settings", json.dumps(confinement))
    )
    results = texts(run)
    assert "ConnectionRefusedError" in results[0] or "Network is unreachable" in results[0], results[0]
    assert results[1].startswith("Exit code"), results[1]
    assert connected == []


@pytest.mark.parametrize("mode", ["default", "acceptEdits", "bypassPermissions"])
def test_the_file_tools_refuse_every_path_outside_the_working_directory_in_every_mode(
    layout: Layout, mode: str
) -> None:
    if mode == "bypassPermissions":
        # As root the CLI refuses bypass unless told it runs in a sandbox of its own.
        layout.workspace.env["IS_SANDBOX"] = "1"
    outside = layout.other_context.parent / "planted.txt"
    run = layout.run(
        tool_call("Read", file_path=str(layout.own_file)),
        *(tool_call("Read", file_path=str(path)) for path in layout.canaries()),
        tool_call("Write", file_path=str(outside), content="planted"),
        args=("--permission-mode", mode, "--permission-prompt-tool", PROMPT_TOOL),
    )
    assert run.init["permissionMode"] == mode
    own, *reads, written = texts(run)
    assert own == "1\town-file-content"
    for path, text in zip(layout.canaries(), reads, strict=True):
        # A deny rule is checked first; every other path outside is refused by the block.
        assert text == FILE_RULE_DENIED if path in layout.private() else READ_BLOCKED in text, text
    assert WRITE_BLOCKED in written
    assert_no_canary(layout, reads)
    assert not outside.exists()
    assert layout.other_context.read_text() == "canary-other-project"
    assert [call["tool_name"] for call in layout.workspace.prompt_tool_calls()] == []


def test_the_deny_rules_alone_refuse_the_private_places_in_bypass_mode(layout: Layout) -> None:
    layout.workspace.env["IS_SANDBOX"] = "1"
    rules = {"permissions": {"deny": sandbox.file_tool_denials(layout.root)}}
    run = layout.run(
        tool_call("Read", file_path=str(layout.relay_config)),
        tool_call("Read", file_path=str(layout.transcript)),
        tool_call("Write", file_path=str(layout.relay_config.parent / "x.json"), content="{}"),
        tool_call("Read", file_path=str(layout.own_file)),
        args=("--permission-mode", "bypassPermissions", "--settings", json.dumps(rules)),
        confined=False,
    )
    assert texts(run) == [FILE_RULE_DENIED, FILE_RULE_DENIED, FILE_RULE_DENIED, "1\town-file-content"]


def test_grep_and_glob_are_no_tools_of_this_cli_so_searches_go_through_the_sandboxed_shell(
    layout: Layout,
) -> None:
    run = layout.run(
        tool_call("Grep", pattern="canary", path=str(Path(settings.STORAGE_ROOT))),
        tool_call("Glob", pattern="**/*", path=str(Path(settings.STORAGE_ROOT))),
    )
    assert {"Grep", "Glob"}.isdisjoint(run.init["tools"])
    grep, glob = texts(run)
    assert grep.startswith(NO_SUCH_TOOL.format(tool="Grep")) and glob.startswith(
        NO_SUCH_TOOL.format(tool="Glob")
    )


@pytest.mark.parametrize("layout", SCOPES, indirect=True)
def test_a_sandboxed_bash_command_is_still_asked_about(layout: Layout) -> None:
    results = texts(layout.run(bash("touch asked.txt")))
    assert layout.workspace.asked_commands() == ["touch asked.txt"]
    assert results == ["(Bash completed with no output)"]


@pytest.mark.parametrize("layout", SCOPES, indirect=True)
def test_the_workspaces_own_settings_cannot_widen_the_sandbox(layout: Layout) -> None:
    layout.workspace.settings_local(
        {
            "sandbox": {
                "enabled": False,
                "filesystem": {"allowRead": [str(layout.other_context.parent)]},
            },
            "permissions": {
                "blockReadsOutsideWorkingDirectories": False,
                "additionalDirectories": [str(layout.other_context.parent)],
            },
            # Nor can they take a run's commands out of its sandbox.
            "env": {"CLAUDE_CODE_SHELL_PREFIX": ""},
        }
    )
    results = texts(
        layout.run(
            bash(f"cat {layout.other_context}"), tool_call("Read", file_path=str(layout.other_context))
        )
    )
    assert_no_canary(layout, results)


@pytest.mark.parametrize("layout", SCOPES, indirect=True)
def test_each_run_has_a_temporary_directory_of_its_own(layout: Layout) -> None:
    other = sandbox.run_tmp_open(2)
    try:
        write(other / "claude-0" / "output.txt", "canary-other-run-output")
        [result] = texts(layout.run(bash(f'echo "$TMPDIR"; cat {other}/claude-0/output.txt')))
    finally:
        sandbox.run_tmp_close(other)
    own_tmp, error = result.removeprefix("Exit code 1\n").splitlines()
    if layout.scope == "command":
        # Not the CLI's default, /tmp/claude-<uid>, which every run of this OS user shares.
        assert own_tmp == f"{layout.tmpdir}/claude-{os.getuid()}"
    else:
        # No TMPDIR: /tmp itself is the run's own, empty at its start and gone at its end.
        assert own_tmp == ""
    assert error.endswith("No such file or directory")


def test_a_cli_that_cannot_start_its_sandbox_refuses_to_run(layout: Layout, tmp_path: Path) -> None:
    # Every program of the usual PATH but bubblewrap.
    bin_dir = tmp_path / "bin-without-bwrap"
    bin_dir.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        for program in Path(directory).iterdir() if Path(directory).is_dir() else ():
            if program.name != "bwrap" and not os.path.lexists(bin_dir / program.name):
                (bin_dir / program.name).symlink_to(program)
    layout.workspace.env["PATH"] = str(bin_dir)
    run = layout.run(bash("echo ran"))
    assert run.returncode == 1
    assert run.stderr.strip().startswith(SANDBOX_REQUIRED), run.stderr
    assert "bubblewrap (bwrap) not installed" in run.stderr
    assert [line.get("startup_failure_reason") for line in run.lines] == ["sandbox_required_unavailable"]


# --- The run scope's own facts -----------------------------------------------------------

RUN_SCOPE = pytest.mark.parametrize("layout", ["run"], indirect=True)


@RUN_SCOPE
def test_a_runs_commands_share_its_sandbox_and_what_they_leave_running_ends_with_it(layout: Layout) -> None:
    marker = "2999.25"  # a sleep no other test starts
    started, seen = texts(
        layout.run(
            bash(f"nohup sleep {marker} >/dev/null 2>&1 & echo started"),
            bash(f"ps -eo args | grep -c '^sleep {marker}'"),
        )
    )
    assert (started, seen) == ("started", "1")
    assert layout.held is not None
    assert subprocess.run(["pgrep", "-f", f"sleep {marker}"], check=False).returncode == 0
    layout.held.stop()
    assert subprocess.run(["pgrep", "-f", f"sleep {marker}"], check=False).returncode == 1


@RUN_SCOPE
def test_a_command_has_no_capabilities_and_cannot_lift_what_hides_the_host(layout: Layout) -> None:
    results = texts(
        layout.run(
            bash("grep -E '^Cap(Prm|Eff|Bnd|Amb)' /proc/self/status"),
            bash(
                f"umount -l /tmp; umount -l {layout.var_file.parent}; cat {layout.scratch_file} {layout.var_file}"
            ),
            bash("ls -A /run /var/run | grep -v ':$' | grep -c . ; echo listed"),
        )
    )
    capabilities, unmounted, sockets = results
    assert [line.split()[1] for line in capabilities.splitlines()] == ["0000000000000000"] * 4
    assert "must be superuser" in unmounted or "Operation not permitted" in unmounted, unmounted
    assert_no_canary(layout, results)
    # Local servers' sockets (PostgreSQL's, a container runtime's) are out of sight.
    assert sockets.splitlines()[-2:] == ["0", "listed"], sockets


@RUN_SCOPE
def test_a_workspaces_own_mcp_server_starts_inside_the_sandbox(layout: Layout) -> None:
    leak = layout.root / "leak.txt"
    probe = f"cat {layout.scratch_file} {layout.other_context} > {leak} 2>&1; printenv ANTHROPIC_API_KEY >> {leak}"
    mcp = json.loads((layout.root / ".mcp.json").read_text())
    mcp["mcpServers"]["probe"] = {"type": "stdio", "command": "/bin/sh", "args": ["-c", probe]}
    (layout.root / ".mcp.json").write_text(json.dumps(mcp))
    # The prompt tool (the trusted server, outside) still decides this command.
    assert texts(layout.run(bash("touch decided.txt"))) == ["(Bash completed with no output)"]
    assert layout.workspace.asked_commands() == ["touch decided.txt"]
    written = leak.read_text()
    assert "No such file or directory" in written, written
    assert_no_canary(layout, [written])
    assert layout.workspace.env["ANTHROPIC_API_KEY"] not in written


@RUN_SCOPE
def test_a_command_of_a_run_whose_sandbox_ended_does_not_run(layout: Layout) -> None:
    assert layout.held is not None
    settings_text = json.dumps(layout.confinement())
    pid = layout.held.pid
    # The sandbox dies under a live run (its first process killed); its prefix stays.
    signal.pidfd_send_signal(layout.held.handle, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{pid}/ns/mnt").exists(), timeout=5, what="the sandbox to end")
    run = layout.workspace.run(bash("touch ran.txt"), QUOTE, args=(*PROMPTED, "--settings", settings_text))
    [result] = texts(run)
    assert run_sandbox.MSG_ENDED in result, result
    assert not (layout.root / "ran.txt").exists()


@RUN_SCOPE
def test_outside_claude_codes_own_sandbox_inline_code_is_asked_about_whatever_the_rules(
    layout: Layout,
) -> None:
    # The CLI does not know of the run's sandbox, so it treats commands as unconfined: rules
    # that would allow inline interpreter code are not applied (it asks), scoped ones are.
    layout.workspace.settings_local(
        {"permissions": {"allow": ["Bash(python3:*)", "Bash(python3 -m timeit:*)"]}}
    )
    inline, module = texts(
        layout.run(bash("python3 -c 'print(6 * 7)'"), bash("python3 -m timeit -n 1 -r 1 'pass'"))
    )
    assert inline == "42" and "1 loop" in module, (inline, module)
    assert layout.workspace.asked_commands() == ["python3 -c 'print(6 * 7)'"]


@pytest.fixture
def open_outside(settings: Any) -> Iterator[tuple[int, list[str]]]:
    """A web server standing for a public host, opened to the run scope's egress (the
    operator's allow list), set before the layout starts the run's sandbox."""
    settings.CLAUDE_SANDBOX_EGRESS_ALLOW = (egress_tests.OUTSIDE_NETWORK,)
    yield from egress_tests.serve(egress_tests.OUTSIDE)


@RUN_SCOPE
def test_a_command_reaches_the_network_through_the_runs_egress_and_never_the_servers_loopback(
    open_outside: tuple[int, list[str]], layout: Layout, loopback_server: tuple[int, list[str]]
) -> None:
    outside_port, outside_peers = open_outside
    loopback_port, connected = loopback_server
    fetched, forced, direct = texts(
        layout.run(
            bash(f"curl -sS -m 10 http://{egress_tests.OUTSIDE}:{outside_port}/from-claude"),
            bash(f"curl -sS -m 10 --noproxy '' http://127.0.0.1:{loopback_port}/"),
            bash(f"curl -sS -m 5 --noproxy '*' http://127.0.0.1:{loopback_port}/"),
        )
    )
    assert fetched.startswith("GET /from-claude HTTP/1.1"), fetched
    assert len(outside_peers) == 1
    assert forced == egress.MSG_REFUSED.format(host="127.0.0.1", address="127.0.0.1"), forced
    assert "Failed to connect to 127.0.0.1" in direct, direct
    assert connected == []
