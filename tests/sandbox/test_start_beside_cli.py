"""Both engines spawn the CLI while the run's sandbox starts (``sandbox.confine`` returns
before it has started): the CLI's own start (some 300 ms) no longer waits for the sandbox's. Claude
gets the prompt, and the run's commands enter the sandbox, once it has started.

The real app, the real CLI and bubblewrap; only the model is scripted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from promptmgr import run_sandbox, sandbox
from promptmgr.cli import find_claude_cli
from tests.conftest import LiveServer
from tests.helpers import QUOTE, login_client, make_project, read_sse, script, start_run, tool_results
from tests.sandbox.test_isolation import Approver, bash

pytestmark = pytest.mark.e2e


def clis_of(tmpdir: Path) -> list[int]:
    """The bundled CLIs whose environment names ``tmpdir`` as theirs (``CLAUDE_CODE_TMPDIR``);
    not the guardian that starts each one, which has that environment too."""
    program = find_claude_cli().encode()
    mark = f"CLAUDE_CODE_TMPDIR={tmpdir}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().split(b"\0")[0] == program and mark in (
                    entry / "environ"
                ).read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_the_cli_starts_while_its_run_sandbox_starts_and_its_commands_still_run_inside_it(
    app_server: LiveServer, alice: Any, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    # The sandbox starts only once the run's CLI is seen running: were the CLI spawned after
    # the sandbox had started, as before, this start would wait in vain.
    clis_before_the_sandbox: list[list[int]] = []
    start = sandbox.start_run_sandbox

    def start_once_the_cli_runs(**kwargs: Any) -> run_sandbox.RunSandbox:
        deadline = time.monotonic() + 30
        while not (found := clis_of(kwargs["tmpdir"])) and time.monotonic() < deadline:
            time.sleep(0.02)
        clis_before_the_sandbox.append(found)
        return start(**kwargs)

    monkeypatch.setattr(sandbox, "start_run_sandbox", start_once_the_cli_runs)
    project = make_project(owner=alice, engine=engine, permission_mode="default")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(bash("readlink /proc/self/ns/mnt"), QUOTE))
    # The CLI may take this read-only command as safe, or ask: then it is allowed.
    approver = Approver(login_client(app_server, "alice", "alice-password"), started["events_url"])
    events = read_sse(client, started["events_url"], timeout=120)
    approver.join()

    assert events[-1].data == {"status": "completed"}, [(e.event, e.data) for e in events[-6:]]
    assert [len(found) for found in clis_before_the_sandbox] == [1]
    [result] = tool_results(events)
    # The command ran in the run's sandbox: a mount namespace that is not the server's.
    assert result["text"].startswith("mnt:[") and result["text"].strip() != os.readlink("/proc/self/ns/mnt")
