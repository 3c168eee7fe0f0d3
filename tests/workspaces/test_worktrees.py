"""A worktree per conversation, on real git: made for the first run, set up with the project's
copy globs and generated files, covered by sync_workspaces, removed without losing work."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from core.errors import Conflict
from promptmgr.git import worktrees as git_worktrees
from promptmgr.models import Conversation, Project, Run, RunStatus, WorkspaceStatus
from promptmgr.services import worktrees
from promptmgr.services.git_workspace import MSG_CLONING
from promptmgr.services.projects import project_create, project_update
from promptmgr.workspaces import CLAUDE_MD_HEADER, CONTEXT_FILE, workspace_path, workspace_sync
from tests.helpers import make_project
from tests.workspaces.support import README, REPO_CLAUDE_MD, cloned_project, git, status

pytestmark = [pytest.mark.django_db, pytest.mark.unit]


def conversation(project: Project, user: Any) -> Conversation:
    made: Conversation = Conversation.objects.create(project=project, user=user, title="t")
    return made


@pytest.fixture
def project(alice: Any, origin: Path) -> Project:
    made: Project = cloned_project(
        alice, origin, context="Use tabs.", worktree_copy_globs=".env\nconfig/*.local"
    )
    return made


def test_each_conversation_works_on_its_own_branch_and_worktree(
    project: Project, alice: Any, bob: Any
) -> None:
    first, second = conversation(project, alice), conversation(project, bob)

    one = worktrees.conversation_worktree_ensure(first)
    two = worktrees.conversation_worktree_ensure(second)

    assert one != two
    assert one.parent == two.parent == Path(project_root_storage(project)) / "worktrees" / str(project.pk)
    assert git(one, "branch", "--show-current").strip() == f"pm/{first.pk}"
    assert git(two, "branch", "--show-current").strip() == f"pm/{second.pk}"
    # Both start from the project's default branch.
    assert git(one, "rev-parse", "HEAD") == git(workspace_path(project), "rev-parse", "trunk")
    (one / "README.md").write_text("changed in the first conversation\n")
    assert (two / "README.md").read_text() == README
    first.refresh_from_db()
    assert (first.branch, first.worktree_path) == (f"pm/{first.pk}", str(one))
    assert worktrees.conversation_worktree_ensure(first) == one  # made once


def test_a_worktree_directory_deleted_by_hand_is_made_again_on_its_branch(
    project: Project, alice: Any
) -> None:
    talk = conversation(project, alice)
    path = worktrees.conversation_worktree_ensure(talk)
    (path / "kept.txt").write_text("committed on the branch\n")
    git(path, "add", "kept.txt")
    git(path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "--quiet", "-m", "kept")
    shutil.rmtree(path)  # git still lists it, which blocks its branch and path until pruned

    again = worktrees.conversation_worktree_ensure(talk)

    assert again == path and git_worktrees.is_worktree(path)
    assert git(path, "branch", "--show-current").strip() == f"pm/{talk.pk}"
    assert (path / "kept.txt").read_text() == "committed on the branch\n"


def project_root_storage(project: Project) -> Path:
    return workspace_path(project).parent.parent


def test_generated_files_are_in_the_worktree_and_never_in_git_status(project: Project, alice: Any) -> None:
    path = worktrees.conversation_worktree_ensure(conversation(project, alice))

    assert (path / CONTEXT_FILE).read_text() == CLAUDE_MD_HEADER + "\nUse tabs.\n"
    assert (path / "CLAUDE.md").read_text() == REPO_CLAUDE_MD
    assert json.loads((path / ".mcp.json").read_text())["mcpServers"]["ask-user"]
    assert (path / ".claude" / "settings.local.json").exists()
    assert status(path) == ""
    git(path, "add", "--all")
    assert git(path, "diff", "--cached", "--name-only") == ""


def test_a_generated_file_the_repository_tracks_stays_out_of_its_status(alice: Any, tmp_path: Path) -> None:
    from tests.workspaces.support import make_origin

    team_mcp = json.dumps({"mcpServers": {"team": {"type": "stdio", "command": "team-tool", "args": []}}})
    origin = make_origin(tmp_path / "team.git", {"README.md": README, ".mcp.json": team_mcp})
    project = cloned_project(alice, origin)

    path = worktrees.conversation_worktree_ensure(conversation(project, alice))

    servers = json.loads((path / ".mcp.json").read_text())["mcpServers"]
    assert set(servers) == {"team", "ask-user"}
    assert status(path) == ""


def test_servers_and_rules_added_to_the_main_checkout_reach_new_worktrees(
    project: Project, alice: Any
) -> None:
    settings_file = workspace_path(project) / ".claude" / "settings.local.json"
    data = json.loads(settings_file.read_text())
    data["permissions"]["allow"].append("Bash(make test)")
    settings_file.write_text(json.dumps(data))

    path = worktrees.conversation_worktree_ensure(conversation(project, alice))

    allow = json.loads((path / ".claude" / "settings.local.json").read_text())["permissions"]["allow"]
    assert "Bash(make test)" in allow and "mcp__ask-user__ask_user" in allow


def test_copy_globs_bring_ignored_files_but_nothing_outside_or_through_links(
    project: Project, alice: Any, tmp_path: Path
) -> None:
    root = workspace_path(project)
    (root / ".env").write_text("API_KEY=dev\n")
    (root / "config").mkdir()
    (root / "config" / "db.local").write_text("sqlite\n")
    outside = tmp_path / "outside.local"
    outside.write_text("secret\n")
    (root / "config" / "link.local").symlink_to(outside)

    path = worktrees.conversation_worktree_ensure(conversation(project, alice))

    assert (path / ".env").read_text() == "API_KEY=dev\n"
    assert (path / "config" / "db.local").read_text() == "sqlite\n"
    assert not (path / "config" / "link.local").exists()
    assert status(path) == "?? config/db.local\n"  # not ignored by the repository: visible, as it should


def test_runs_wait_for_the_clone_and_get_409(alice: Any, origin: Path) -> None:
    cloning = project_create(owner=alice, name="Later", git_url=f"file://{origin}")

    with pytest.raises(Conflict) as refused:
        worktrees.conversation_worktree_ensure(conversation(cloning, alice))

    assert refused.value.detail == MSG_CLONING
    assert not worktrees.conversation_worktree_path(conversation(cloning, alice)).exists()


def test_a_project_without_a_url_is_a_fresh_repository_with_one_empty_commit(alice: Any) -> None:
    project = project_create(owner=alice, name="Fresh", context="Be brief.")

    root = workspace_path(project)
    assert project.workspace_status == WorkspaceStatus.READY
    assert project.default_branch == "main"
    assert git(root, "log", "--format=%s").strip() == "Start of the workspace"
    assert git(root, "show", "--name-only", "--format=", "HEAD") == ""
    assert status(root) == ""


def test_a_workspace_from_before_git_becomes_the_first_commit(alice: Any) -> None:
    project = make_project(owner=alice)  # an old-style workspace: generated files, no repository
    (workspace_path(project) / "notes.txt").write_text("kept\n")

    path = worktrees.conversation_worktree_ensure(conversation(project, alice))

    assert (path / "notes.txt").read_text() == "kept\n"
    assert git(path, "show", "--name-only", "--format=", "HEAD").split() == ["notes.txt"]
    assert status(path) == ""


def test_sync_workspaces_covers_every_worktree(project: Project, alice: Any, bob: Any) -> None:
    paths = [worktrees.conversation_worktree_ensure(conversation(project, user)) for user in (alice, bob)]
    project.context = "Use spaces."
    project.save()

    out = StringIO()
    call_command("sync_workspaces", stdout=out)

    for root in [workspace_path(project), *paths]:
        assert f"updated {root / CONTEXT_FILE}" in out.getvalue()
        assert "Use spaces." in (root / CONTEXT_FILE).read_text()
    assert out.getvalue().splitlines()[-1] == "3 file(s) changed in 1 project(s)"


def test_an_always_allow_rule_reaches_every_worktree(
    project: Project, alice: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from promptmgr.models import PermissionRule

    path = worktrees.conversation_worktree_ensure(conversation(project, alice))
    with django_capture_on_commit_callbacks(execute=True):
        PermissionRule.objects.create(project=project, rule="Bash(npm test:*)")

    for root in (workspace_path(project), path):
        allow = json.loads((root / ".claude" / "settings.local.json").read_text())["permissions"]["allow"]
        assert "Bash(npm test:*)" in allow


def test_deleting_a_conversation_removes_its_worktree_and_keeps_its_work_on_the_branch(
    project: Project, alice: Any, django_capture_on_commit_callbacks: Any
) -> None:
    talk = conversation(project, alice)
    path = worktrees.conversation_worktree_ensure(talk)
    (path / "README.md").write_text("edited, never committed\n")
    (path / "new.txt").write_text("new file\n")
    branch = f"pm/{talk.pk}"

    with django_capture_on_commit_callbacks(execute=True):
        talk.delete()

    repo = workspace_path(project)
    assert not path.exists()
    assert git(repo, "show", f"{branch}:README.md") == "edited, never committed\n"
    assert git(repo, "show", f"{branch}:new.txt") == "new file\n"
    assert git(repo, "log", "-1", "--format=%s", branch).startswith("Uncommitted work kept")
    assert f"{path}" not in git(repo, "worktree", "list")


def test_the_idle_sweep_commits_uncommitted_work_then_removes_the_worktree(
    project: Project, alice: Any
) -> None:
    idle, busy, recent = (conversation(project, alice) for _ in range(3))
    paths = {c.pk: worktrees.conversation_worktree_ensure(c) for c in (idle, busy, recent)}
    (paths[idle.pk] / "README.md").write_text("half done\n")
    git(paths[idle.pk], "switch", "--quiet", "--detach")  # even a detached HEAD keeps its work
    long_ago = timezone.now() - timedelta(days=30)
    Conversation.objects.filter(pk__in=[idle.pk, busy.pk]).update(updated_at=long_ago)
    Run.objects.create(conversation=busy, user=alice, prompt="p", status=RunStatus.RUNNING)

    out = StringIO()
    call_command("sweep_worktrees", "--idle-days", "14", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0].startswith(
        f"removed {paths[idle.pk]} (conversation {idle.pk}), uncommitted work committed as "
    )
    assert lines[-1] == "1 idle worktree(s) removed"
    assert not paths[idle.pk].exists()
    assert paths[busy.pk].exists() and paths[recent.pk].exists()
    repo = workspace_path(project)
    kept = [
        b
        for b in git(repo, "branch", "--format=%(refname:short)").split()
        if b.startswith(f"pm/{idle.pk}-kept-")
    ]
    assert len(kept) == 1
    assert git(repo, "show", f"{kept[0]}:README.md") == "half done\n"
    assert Conversation.objects.get(pk=idle.pk).worktree_path == ""

    # The conversation's next prompt makes its worktree again, from its branch.
    idle.refresh_from_db()
    again = worktrees.conversation_worktree_ensure(idle)
    assert again == paths[idle.pk]
    assert git(again, "branch", "--show-current").strip() == f"pm/{idle.pk}"


def test_a_worktree_in_the_middle_of_a_merge_is_left_alone(project: Project, alice: Any) -> None:
    talk = conversation(project, alice)
    path = worktrees.conversation_worktree_ensure(talk)
    (git_worktrees.git_dir(path) / "MERGE_HEAD").write_text(git(path, "rev-parse", "HEAD"))
    (path / "README.md").write_text("conflicted\n")
    Conversation.objects.filter(pk=talk.pk).update(updated_at=timezone.now() - timedelta(days=30))

    out = StringIO()
    call_command("sweep_worktrees", stdout=out)

    assert "a merge, rebase or similar is in progress" in out.getvalue()
    assert (path / "README.md").read_text() == "conflicted\n"


def test_dry_run_reports_and_removes_nothing(project: Project, alice: Any) -> None:
    talk = conversation(project, alice)
    path = worktrees.conversation_worktree_ensure(talk)
    Conversation.objects.filter(pk=talk.pk).update(updated_at=timezone.now() - timedelta(days=30))

    out = StringIO()
    call_command("sweep_worktrees", "--dry-run", stdout=out)

    assert out.getvalue().splitlines() == [
        f"would remove {path} (conversation {talk.pk})",
        "1 idle worktree(s) would be removed (dry run, nothing changed)",
    ]
    assert path.exists()


def test_disk_use_counts_the_repository_and_each_worktree(project: Project, alice: Any) -> None:
    talk = conversation(project, alice)
    path = worktrees.conversation_worktree_ensure(talk)
    (path / "big.bin").write_bytes(b"x" * 1_000_000)

    usage = worktrees.project_disk_usage(project)

    assert usage.repository_bytes > 0
    assert usage.worktrees[talk.pk] >= 1_000_000
    assert usage.total_bytes == usage.repository_bytes + usage.worktrees[talk.pk]


def test_a_setup_command_runs_once_per_new_worktree_and_its_failure_is_reported(
    project: Project, alice: Any
) -> None:
    path = worktrees.conversation_worktree_ensure(conversation(project, alice))

    failed = worktrees.setup_if_pending(worktree=path, command="echo installing; echo broken >&2; exit 3")
    assert failed is not None and not failed.ok
    assert (failed.exit_code, failed.output) == (3, "installing\nbroken\n")
    assert worktrees.setup_failure_message(failed) == (
        "The project's setup command failed in this conversation's worktree (exit code 3):\ninstalling\nbroken"
    )

    done = worktrees.setup_if_pending(worktree=path, command="touch .env.setup-ran && echo ok")
    assert done is not None and done.ok and (path / ".env.setup-ran").exists()
    assert worktrees.setup_if_pending(worktree=path, command="touch twice") is None
    assert not (path / "twice").exists()


def test_a_setup_command_past_its_time_limit_is_stopped(project: Project, alice: Any, settings: Any) -> None:
    settings.WORKSPACE_SETUP_TIMEOUT = 1
    path = worktrees.conversation_worktree_ensure(conversation(project, alice))

    result = worktrees.setup_if_pending(worktree=path, command="echo started; sleep 30")

    assert result is not None and result.stopped == "time limit of 1 s"
    assert "time limit of 1 s" in worktrees.setup_failure_message(result)
    assert worktrees.setup_if_pending(worktree=path, command="true") is not None  # still pending


def test_only_staff_set_a_setup_command(project: Project, alice: Any) -> None:
    from promptmgr.services.projects import SETUP_STAFF_ONLY, ModeNotAllowed

    with pytest.raises(ModeNotAllowed, match=SETUP_STAFF_ONLY):
        project_update(project=project, actor=alice, worktree_setup_command="npm ci")
    alice.is_staff = True
    project_update(project=project, actor=alice, worktree_setup_command="npm ci")
    alice.is_staff = False
    # Others may still change the rest of a project staff set up so.
    project_update(project=project, actor=alice, context="Changed", worktree_setup_command="npm ci")
    assert Project.objects.get(pk=project.pk).worktree_setup_command == "npm ci"
    assert workspace_sync(project=project) == []


def test_a_conversation_from_before_worktrees_goes_on_where_its_session_lives(alice: Any) -> None:
    from promptmgr.services.runs import _create_run

    project = make_project(owner=alice)
    talk = Conversation.objects.create(project=project, user=alice, claude_session_id="old-session")
    Run.objects.create(
        conversation=talk,
        user=alice,
        prompt="p",
        status=RunStatus.COMPLETED,
        workdir=str(workspace_path(project)),
    )
    fresh = conversation(project, alice)

    continued = _create_run(user=alice, project_id=project.pk, prompt="again", conversation_id=talk.pk)
    started = _create_run(user=alice, project_id=project.pk, prompt="new", conversation_id=fresh.pk)

    assert Path(continued.workdir) == workspace_path(project)
    assert Conversation.objects.get(pk=talk.pk).branch == ""
    assert Path(started.workdir) == worktrees.conversation_worktree_path(fresh)
