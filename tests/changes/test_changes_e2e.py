"""Run changes end to end: the real CLI (driven by the scripted model) Reads and Edits a
file in acceptEdits mode, and the app records, shows and reverts what it changed.

The project's workspace is made a git repository by the test; the run works wherever the
app puts it (``Run.workdir``: the conversation's worktree), so every check reads there.
"""

from __future__ import annotations

import asyncio
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from promptmgr.models import Run
from promptmgr.services import changes
from tests.changes.support import READ, edit, git_project, status
from tests.conftest import LiveServer
from tests.helpers import SSEEvent, login_client, read_sse, script, start_run

pytestmark = pytest.mark.e2e


def workdir_of(started: dict[str, Any]) -> Path:
    return Path(Run.objects.get(pk=started["run_id"]).workdir)


@dataclass
class ReadmeRun:
    client: Any
    started: dict[str, Any]
    root: Path  # the project's workspace
    events: list[SSEEvent]

    @property
    def changes(self) -> dict[str, Any]:
        [changed] = [e for e in self.events if e.event == "changes"]
        return changed.data  # type: ignore[no-any-return]


def readme_edit_run(app_server: LiveServer, owner: Any, **fields: Any) -> ReadmeRun:
    """A run in a new git project of ``owner``'s that Reads README.md and Edits its status,
    read to its end."""
    project, root = git_project(owner, **fields)
    client = login_client(app_server, owner.username, f"{owner.username}-password")
    started = start_run(
        client, project.pk, script(READ, edit("status: draft", "status: final"), {"text": "Done."})
    )
    return ReadmeRun(client, started, root, read_sse(client, started["events_url"]))


def test_a_run_that_edits_readme_gives_changes_a_diff_the_new_content_and_reverts(
    app_server: LiveServer, alice: Any, bob: Any
) -> None:
    run = readme_edit_run(app_server, alice)
    client, started, root, events = run.client, run.started, run.root, run.events

    assert events[-1].data == {"status": "completed"}
    assert run.changes["files"] == [
        {
            "path": "README.md",
            "status": "modified",
            "additions": 1,
            "deletions": 1,
            "binary": False,
            "collapsed": None,
        }
    ]
    # Shown after a reload too: the event is in the stored history.
    history = client.get(f"/api/conversations/{started['conversation_id']}").json()
    assert "changes" in [e["event"] for e in history["runs"][0]["events"]]

    diff = client.get(f"/api/runs/{started['run_id']}/changes").json()
    assert "-status: draft\n+status: final\n" in diff["diff"]
    content = client.get(
        f"/api/conversations/{started['conversation_id']}/files/content", params={"path": "README.md"}
    ).json()
    assert content["content"] == "# Demo\nstatus: final\n"

    download = client.get(f"/api/conversations/{started['conversation_id']}/files/zip")
    assert download.status_code == 200
    assert download.headers["content-type"] == "application/zip"
    assert download.headers["content-disposition"] == (
        f'attachment; filename="conversation-{started["conversation_id"]}.zip"'
    )
    archive = zipfile.ZipFile(io.BytesIO(download.content))
    assert archive.read("README.md") == b"# Demo\nstatus: final\n"
    # Git's view of the worktree: the generated files (excluded from git) are not in it.
    assert ".mcp.json" not in archive.namelist()

    stranger = login_client(app_server, "bob", "bob-password")
    assert stranger.get(f"/api/runs/{started['run_id']}/changes").status_code == 404
    assert stranger.post(f"/api/runs/{started['run_id']}/revert").status_code == 404
    assert stranger.get(f"/api/conversations/{started['conversation_id']}/files/zip").status_code == 404
    for path in ("../../../etc/passwd", "/etc/passwd", ".git/config"):
        response = client.get(
            f"/api/conversations/{started['conversation_id']}/files/content", params={"path": path}
        )
        assert response.status_code == 404, path

    workdir = workdir_of(started)
    assert (workdir / "README.md").read_text() == "# Demo\nstatus: final\n"
    reverted = client.post(f"/api/runs/{started['run_id']}/revert")
    assert reverted.status_code == 200, reverted.text
    assert (workdir / "README.md").read_text() == "# Demo\nstatus: draft\n"
    assert status(workdir) == ""
    assert (root / "README.md").read_text() == "# Demo\nstatus: draft\n"


def test_revert_is_409_after_a_later_run_changed_the_same_file(app_server: LiveServer, alice: Any) -> None:
    project, _root = git_project(alice)
    client = login_client(app_server, "alice", "alice-password")
    first = start_run(client, project.pk, script(READ, edit("draft", "review"), {"text": "1"}))
    read_sse(client, first["events_url"])
    second = start_run(
        client, project.pk, script(READ, edit("review", "final"), {"text": "2"}), first["conversation_id"]
    )
    read_sse(client, second["events_url"])
    readme = workdir_of(second) / "README.md"
    assert readme.read_text() == "# Demo\nstatus: final\n"

    blocked = client.post(f"/api/runs/{first['run_id']}/revert")

    assert blocked.status_code == 409
    assert blocked.json()["detail"] == changes.MSG_CHANGED_AGAIN.format(
        run_id=second["run_id"], paths="README.md"
    )
    assert readme.read_text() == "# Demo\nstatus: final\n"
    assert client.post(f"/api/runs/{second['run_id']}/revert").status_code == 200
    assert client.post(f"/api/runs/{first['run_id']}/revert").status_code == 200
    assert readme.read_text() == "# Demo\nstatus: draft\n"


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_a_slow_start_snapshot_is_still_taken_before_claude_edits(
    app_server: LiveServer, alice: Any, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """The start snapshot is taken while the sandbox (and the CLI engine's CLI) start; Claude
    gets the prompt only once it is done, so however long it takes, the run's edit is in
    its changes."""
    record_start = changes.record_start

    async def slow_record_start(run_id: int, workdir: Path) -> None:
        await asyncio.sleep(2)  # longer than the whole scripted run takes
        await record_start(run_id, workdir)

    monkeypatch.setattr(changes, "record_start", slow_record_start)

    run = readme_edit_run(app_server, alice, engine=engine)

    assert run.events[-1].data == {"status": "completed"}
    assert [(f["path"], f["status"]) for f in run.changes["files"]] == [("README.md", "modified")]
