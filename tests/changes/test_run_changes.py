"""A run's changes recorded by the supervisor's hooks, read through the API and reverted,
on real repositories (no CLI here: the edits are made the way Claude's tools make them)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from promptmgr.models import Conversation, Project, Run
from promptmgr.services import changes, run_state
from promptmgr.services.run_state import Outcome
from tests.changes.support import Ended, make_repo, run_git, run_in, status, write

# The hooks write from worker threads, as in the app: a test transaction would lock them out.
pytestmark = [pytest.mark.unit, pytest.mark.django_db(transaction=True)]

ClientFor = Callable[[Any], Client]


def revert(client: Client, run: Ended) -> Any:
    return client.post(f"/api/runs/{run.pk}/revert", content_type="application/json")


@pytest.fixture
def readme_run(conversation: Conversation, worktree: Path) -> Ended:
    return run_in(conversation, worktree, write(worktree / "README.md", "# Demo\nEdited by Claude.\n"))


def test_a_run_that_edits_a_file_gives_the_changes_event(readme_run: Ended) -> None:
    assert readme_run.event == {
        "run_id": readme_run.pk,
        "files": [
            {
                "path": "README.md",
                "status": "modified",
                "additions": 1,
                "deletions": 0,
                "binary": False,
                "collapsed": None,
            }
        ],
        "total_files": 1,
        "additions": 1,
        "deletions": 0,
        "commit": None,
    }
    assert readme_run.run.start_snapshot and readme_run.run.end_snapshot
    assert readme_run.run.changed_files == readme_run.event["files"]


def test_the_changes_endpoint_gives_the_files_and_the_unified_diff(
    client_for: ClientFor, readme_run: Ended, bob: Any
) -> None:
    body = client_for(bob).get(f"/api/runs/{readme_run.pk}/changes").json()
    assert [f["path"] for f in body["files"]] == ["README.md"]
    assert body["diff"].startswith("diff --git a/README.md b/README.md\n")
    assert "\n+Edited by Claude.\n" in body["diff"]
    assert '<span class="ln d-add">+Edited by Claude.</span>' in body["html"]
    assert (body["truncated"], body["reverted_at"]) == (False, None)


def test_one_files_diff_is_highlighted_for_its_language(
    client_for: ClientFor, conversation: Conversation, worktree: Path, alice: Any
) -> None:
    def edit() -> None:
        (worktree / "src" / "app.py").write_text("def main():\n    return 2\n")
        (worktree / "notes.txt").write_text("other\n")

    run = run_in(conversation, worktree, edit)
    body = client_for(alice).get(f"/api/runs/{run.pk}/changes", {"path": "src/app.py"}).json()
    assert [f["path"] for f in body["files"]] == ["src/app.py"]
    assert "notes.txt" not in body["diff"]
    assert (
        '<span class="ln d-add">+    <span class="hl-k">return</span> <span class="hl-mi">2</span></span>'
        in body["html"]
    )
    missing = client_for(alice).get(f"/api/runs/{run.pk}/changes", {"path": "README.md"})
    assert missing.status_code == 404
    assert missing.json()["detail"] == changes.MSG_FILE_NOT_CHANGED


def test_lockfiles_large_and_binary_files_are_marked_collapsed(
    conversation: Conversation, worktree: Path
) -> None:
    def edit() -> None:
        (worktree / "web").mkdir()
        (worktree / "web" / "package-lock.json").write_text('{"lockfileVersion": 3}\n')
        (worktree / "generated.sql").write_text(
            "insert into t values (1);\n" * (changes.LARGE_DIFF_LINES + 1)
        )
        (worktree / "logo.png").write_bytes(b"\x89PNG\0\0")
        (worktree / "small.py").write_text("x = 1\n")

    run = run_in(conversation, worktree, edit)
    assert run.event is not None
    collapsed = {f["path"]: f["collapsed"] for f in run.event["files"]}
    assert collapsed == {
        "generated.sql": "large",
        "logo.png": "binary",
        "small.py": None,
        "web/package-lock.json": "lockfile",
    }


def test_a_run_with_hundreds_of_files_lists_them_all_and_the_event_stays_bounded(
    conversation: Conversation,
    worktree: Path,
    client_for: ClientFor,
    alice: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(changes, "EVENT_FILES", 100)

    def edit() -> None:
        for i in range(250):
            (worktree / "gen" / f"f{i:03}.txt").parent.mkdir(exist_ok=True)
            (worktree / "gen" / f"f{i:03}.txt").write_text(f"{i}\n")

    run = run_in(conversation, worktree, edit)
    event = run.event
    assert event is not None
    assert (len(event["files"]), event["total_files"], event["additions"]) == (100, 250, 250)
    body = client_for(alice).get(f"/api/runs/{run.pk}/changes").json()
    assert len(body["files"]) == 250


def test_the_start_snapshots_index_is_kept_for_the_end_and_then_removed(
    conversation: Conversation, worktree: Path
) -> None:
    seen: list[bool] = []

    def edit() -> None:
        seen.append(changes.run_index(run.pk, worktree).is_file())
        (worktree / "README.md").write_text("edited\n")

    run = Run.objects.create(
        conversation=conversation, user=conversation.user, prompt="p", workdir=str(worktree)
    )
    run_state.run_mark_started(run.pk)
    asyncio.run(changes.record_start(run.pk, worktree))
    edit()
    event = asyncio.run(changes.record_end(run.pk))

    assert seen == [True]
    assert not changes.run_index(run.pk, worktree).exists()
    assert event is not None and [f["path"] for f in event["files"]] == ["README.md"]


def test_a_run_that_changes_nothing_gives_no_event(conversation: Conversation, worktree: Path) -> None:
    run = run_in(conversation, worktree, lambda: None)
    assert run.event is None
    assert run.run.changed_files == [] and run.run.end_snapshot


def test_a_run_outside_git_records_nothing_and_the_endpoints_say_so(
    conversation: Conversation, tmp_path: Path, client_for: ClientFor, alice: Any
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    run = run_in(conversation, folder, write(folder / "a.txt", "a\n"))
    assert run.event is None
    client = client_for(alice)
    for response in (client.get(f"/api/runs/{run.pk}/changes"), revert(client, run)):
        assert response.status_code == 409
        assert response.json() == {"detail": changes.MSG_NOT_TRACKED, "code": "changes_not_tracked"}


def test_a_run_that_ended_without_its_worker_says_its_changes_were_not_recorded(
    conversation: Conversation, worktree: Path, client_for: ClientFor, alice: Any
) -> None:
    # What the recovery sweep leaves: a start snapshot, an ending, no end snapshot.
    run = Run.objects.create(
        conversation=conversation, user=alice, prompt="p", workdir=str(worktree), start_snapshot="abc"
    )
    run_state.run_finish(run.pk, Outcome(status="failed", error="worker gone"))
    response = client_for(alice).get(f"/api/runs/{run.pk}/changes")
    assert response.status_code == 409
    assert response.json() == {"detail": changes.MSG_NOT_RECORDED, "code": "changes_not_recorded"}


def test_a_running_run_has_no_changes_yet(
    conversation: Conversation, worktree: Path, client_for: ClientFor, alice: Any
) -> None:
    active = Run.objects.create(conversation=conversation, user=alice, prompt="p", workdir=str(worktree))
    response = client_for(alice).get(f"/api/runs/{active.pk}/changes")
    assert response.status_code == 409
    assert response.json()["code"] == "run_active"


def test_revert_restores_the_runs_files_and_keeps_the_users_own_edits(
    conversation: Conversation, worktree: Path, client_for: ClientFor, bob: Any
) -> None:
    (worktree / "docs" / "guide.md").write_text("The user's uncommitted edit\n")

    def edit() -> None:
        (worktree / "README.md").write_text("rewritten\n")
        (worktree / "src" / "app.py").unlink()
        (worktree / "new" / "made.py").parent.mkdir()
        (worktree / "new" / "made.py").write_text("pass\n")

    run = run_in(conversation, worktree, edit)
    index_before = run_git(worktree, "ls-files", "-s")

    response = revert(client_for(bob), run)

    assert response.status_code == 200, response.content
    assert response.json()["reverted_at"]
    assert (worktree / "README.md").read_text() == "# Demo\n"
    assert (worktree / "src" / "app.py").read_text() == "def main():\n    return 1\n"
    assert not (worktree / "new").exists()
    assert (worktree / "docs" / "guide.md").read_text() == "The user's uncommitted edit\n"
    assert status(worktree) == " M docs/guide.md\n"
    assert run_git(worktree, "ls-files", "-s") == index_before
    again = revert(client_for(bob), run)
    assert (again.status_code, again.json()["code"]) == (409, "already_reverted")


def test_revert_is_409_while_a_later_run_changed_the_same_file_and_works_once_that_one_is_reverted(
    conversation: Conversation, worktree: Path, client_for: ClientFor, alice: Any
) -> None:
    first = run_in(conversation, worktree, write(worktree / "README.md", "first\n"))
    unrelated = run_in(conversation, worktree, write(worktree / "other.txt", "x\n"))
    second = run_in(conversation, worktree, write(worktree / "README.md", "second\n"))
    client = client_for(alice)

    blocked = revert(client, first)
    assert blocked.status_code == 409
    assert blocked.json() == {
        "detail": changes.MSG_CHANGED_AGAIN.format(run_id=second.pk, paths="README.md"),
        "code": "changed_again",
    }
    assert (worktree / "README.md").read_text() == "second\n"

    undo = revert(client, second)
    assert undo.status_code == 200, undo.content
    assert (worktree / "README.md").read_text() == "first\n"
    assert revert(client, first).status_code == 200
    assert (worktree / "README.md").read_text() == "# Demo\n"
    assert (worktree / "other.txt").read_text() == "x\n"  # the unrelated run's file stays
    assert Run.objects.get(pk=unrelated.pk).reverted_at is None


def test_revert_is_409_when_a_person_edited_the_file_since(
    readme_run: Ended, worktree: Path, client_for: ClientFor, alice: Any
) -> None:
    (worktree / "README.md").write_text("a person's edit after the run\n")
    response = revert(client_for(alice), readme_run)
    assert response.status_code == 409
    assert response.json() == {
        "detail": changes.MSG_EDITED_SINCE.format(paths="README.md"),
        "code": "edited_since",
    }
    assert (worktree / "README.md").read_text() == "a person's edit after the run\n"


def test_strangers_get_404_for_changes_and_revert(
    readme_run: Ended, worktree: Path, client_for: ClientFor, carol: Any
) -> None:
    stranger = client_for(carol)
    assert stranger.get(f"/api/runs/{readme_run.pk}/changes").status_code == 404
    assert revert(stranger, readme_run).status_code == 404
    assert (worktree / "README.md").read_text() == "# Demo\nEdited by Claude.\n"


def test_revert_needs_the_csrf_token(readme_run: Ended, alice: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert revert(client, readme_run).status_code == 403


def test_commit_after_run_commits_each_run_as_its_user_and_revert_commits_the_undo(
    project: Project, conversation: Conversation, worktree: Path, client_for: ClientFor, alice: Any, bob: Any
) -> None:
    Project.objects.filter(pk=project.pk).update(commit_after_run=True)
    alice.first_name, alice.last_name = "Alice", "Example"
    alice.save()
    (worktree / "docs" / "guide.md").write_text("uncommitted, not Claude's\n")
    run = run_in(
        conversation,
        worktree,
        write(worktree / "README.md", "committed by the run\n"),
        "Update the README\nplease",
    )

    assert run.event is not None
    assert run.event["commit"] == run_git(worktree, "rev-parse", "HEAD").strip()
    log = run_git(worktree, "log", "-1", "--format=%an <%ae>%n%B")
    assert log.startswith(
        "Alice Example <alice@example.com>\nUpdate the README\n\nUpdate the README\nplease\n"
    )
    assert f"PromptManager-Run: {run.pk}" in log
    assert run_git(worktree, "show", "--name-only", "--format=", "HEAD").split() == ["README.md"]
    assert status(worktree) == " M docs/guide.md\n"

    assert revert(client_for(bob), run).status_code == 200
    assert run_git(worktree, "log", "-1", "--format=%an|%s").strip() == "bob|Revert “Update the README”"
    assert run_git(worktree, "show", "HEAD:README.md") == "# Demo\n"
    assert status(worktree) == " M docs/guide.md\n"


def test_changes_of_a_run_whose_folder_is_gone_answer_410(
    project: Project, alice: Any, tmp_path: Path, client_for: ClientFor
) -> None:
    repo = make_repo(tmp_path / "gone")
    conversation = Conversation.objects.create(project=project, user=alice, worktree_path=str(repo))
    run = run_in(conversation, repo, write(repo / "README.md", "x\n"))
    shutil.rmtree(repo)
    response = client_for(alice).get(f"/api/runs/{run.pk}/changes")
    assert (response.status_code, response.json()["code"]) == (410, "worktree_gone")
