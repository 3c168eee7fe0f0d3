"""The git plumbing behind run changes, on real repositories: snapshots leave the user's
index, HEAD and branch alone; diffs, restores and commits touch only what they name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from promptmgr import snapshots
from tests.changes.support import make_repo, run_git, status

pytestmark = pytest.mark.unit


def test_only_the_top_of_a_work_tree_counts_as_one(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"src/app.py": "x = 1\n"})
    assert snapshots.work_tree_root(repo) == repo
    assert snapshots.work_tree_root(repo / "src") is None
    assert snapshots.work_tree_root(tmp_path / "plain") is None
    (tmp_path / "plain").mkdir()
    assert snapshots.work_tree_root(tmp_path / "plain") is None


def test_a_folder_inside_another_repository_is_not_taken_for_it(tmp_path: Path) -> None:
    outer = make_repo(tmp_path / "outer")
    inner = outer / "storage" / "projects" / "1"
    inner.mkdir(parents=True)
    assert snapshots.work_tree_root(inner) is None


def test_a_snapshot_leaves_the_index_head_and_status_as_they_were(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "b.txt": "b\n"})
    (repo / "a.txt").write_text("edited\n")
    run_git(repo, "add", "a.txt")  # staged by the user
    (repo / "b.txt").write_text("unstaged\n")
    (repo / "new.txt").write_text("untracked\n")
    before = (status(repo), run_git(repo, "rev-parse", "HEAD"), run_git(repo, "ls-files", "-s"))

    commit = snapshots.snapshot(repo, ref="refs/pm/runs/7/start")

    assert (status(repo), run_git(repo, "rev-parse", "HEAD"), run_git(repo, "ls-files", "-s")) == before
    assert run_git(repo, "rev-parse", "refs/pm/runs/7/start").strip() == commit
    assert run_git(repo, "show", f"{commit}:a.txt") == "edited\n"
    assert run_git(repo, "show", f"{commit}:b.txt") == "unstaged\n"
    assert run_git(repo, "show", f"{commit}:new.txt") == "untracked\n"


def test_a_snapshot_respects_gitignore_and_info_exclude(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", ignore="*.log\n")
    (repo / ".git" / "info" / "exclude").write_text(".mcp.json\n")
    (repo / "debug.log").write_text("noise\n")
    (repo / ".mcp.json").write_text("{}\n")
    (repo / "kept.txt").write_text("kept\n")

    commit = snapshots.snapshot(repo)

    names = run_git(repo, "ls-tree", "-r", "--name-only", commit).split()
    assert names == [".gitignore", "README.md", "kept.txt"]


def test_changes_between_snapshots_have_statuses_and_line_counts(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"edit.py": "a\nb\nc\n", "gone.txt": "x\ny\n"})
    start = snapshots.snapshot(repo)
    (repo / "edit.py").write_text("a\nB\nc\nd\n")
    (repo / "gone.txt").unlink()
    (repo / "deep" / "er").mkdir(parents=True)
    (repo / "deep" / "er" / "new.md").write_text("one\ntwo\n")
    (repo / "image.bin").write_bytes(b"\x89PNG\0\0\1")
    end = snapshots.snapshot(repo, parent=start)

    files = snapshots.changed_files(repo, start, end)

    assert [f.as_dict() for f in files] == [
        {"path": "deep/er/new.md", "status": "added", "additions": 2, "deletions": 0, "binary": False},
        {"path": "edit.py", "status": "modified", "additions": 2, "deletions": 1, "binary": False},
        {"path": "gone.txt", "status": "deleted", "additions": 0, "deletions": 2, "binary": False},
        {"path": "image.bin", "status": "added", "additions": 0, "deletions": 0, "binary": True},
    ]
    diff, cut = snapshots.unified_diff(repo, start, end, ["edit.py"], limit=100_000)
    assert not cut
    assert "-b\n+B\n" in diff and "+d\n" in diff and "gone.txt" not in diff


def test_a_file_name_with_spaces_and_unicode_survives_the_round_trip(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    start = snapshots.snapshot(repo)
    (repo / "notes – été.txt").write_text("hi\n")
    end = snapshots.snapshot(repo)
    [changed] = snapshots.changed_files(repo, start, end)
    assert changed.path == "notes – été.txt"
    snapshots.restore_files(repo, start, [changed.path])
    assert not (repo / "notes – été.txt").exists()


def test_a_long_diff_is_cut_at_the_limit(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    start = snapshots.snapshot(repo)
    (repo / "big.txt").write_text("line\n" * 100_000)
    end = snapshots.snapshot(repo)
    diff, cut = snapshots.unified_diff(repo, start, end, limit=10_000)
    assert cut is True
    assert len(diff) == 10_000


def test_restore_writes_back_only_the_named_files_and_deletes_created_ones(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "old\n", "other.txt": "other\n"})
    (repo / "other.txt").write_text("the user's own edit\n")
    start = snapshots.snapshot(repo)
    (repo / "README.md").write_text("claude's edit\n")
    (repo / "made" / "by").mkdir(parents=True)
    (repo / "made" / "by" / "claude.py").write_text("pass\n")
    (repo / "made" / "keep.txt").write_text("a person's file in the same folder\n")
    index_before = run_git(repo, "ls-files", "-s")

    snapshots.restore_files(repo, start, ["README.md", "made/by/claude.py"])

    assert (repo / "README.md").read_text() == "old\n"
    assert (repo / "other.txt").read_text() == "the user's own edit\n"
    assert not (repo / "made" / "by").exists()  # the folder it created, now empty, goes too
    assert (repo / "made" / "keep.txt").exists()
    assert run_git(repo, "ls-files", "-s") == index_before


def test_restore_never_deletes_through_a_symlinked_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep me\n")
    repo = make_repo(tmp_path / "repo")
    start = snapshots.snapshot(repo)
    (repo / "link").symlink_to(outside)

    with pytest.raises(snapshots.GitError):
        snapshots.restore_files(repo, start, ["link/victim.txt"])
    assert (outside / "victim.txt").read_text() == "keep me\n"


def test_commit_files_commits_only_the_named_paths_as_the_author(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "old\n", "mine.txt": "mine\n"})
    (repo / "mine.txt").write_text("the user's uncommitted edit\n")
    start = snapshots.snapshot(repo)
    (repo / "README.md").write_text("new\n")
    (repo / "added.txt").write_text("added\n")
    end = snapshots.snapshot(repo, parent=start)
    head = run_git(repo, "rev-parse", "HEAD").strip()

    commit = snapshots.commit_files(
        repo,
        source=end,
        paths=["README.md", "added.txt"],
        author=("Alice Example", "alice@example.com"),
        message="Update the readme\n\nThe whole prompt.\n",
    )

    assert commit == run_git(repo, "rev-parse", "HEAD").strip()
    assert run_git(repo, "rev-parse", "HEAD~1").strip() == head
    assert run_git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert run_git(repo, "log", "-1", "--format=%an <%ae>|%s").strip() == (
        "Alice Example <alice@example.com>|Update the readme"
    )
    assert run_git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["README.md", "added.txt"]
    # Only the user's own edit is left as a change; the committed paths are clean.
    assert status(repo) == " M mine.txt\n"


def test_commit_files_with_nothing_new_makes_no_commit(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    start = snapshots.snapshot(repo)
    head = run_git(repo, "rev-parse", "HEAD")
    assert (
        snapshots.commit_files(repo, source=start, paths=["README.md"], author=("A", "a@x"), message="m")
        is None
    )
    assert run_git(repo, "rev-parse", "HEAD") == head


def test_git_gets_no_server_secrets_and_runs_no_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    hook = repo / ".git" / "hooks" / "post-index-change"
    marker = tmp_path / "hook-ran"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    env = snapshots.git_env(repo)
    assert "ANTHROPIC_API_KEY" not in env
    (repo / "x.txt").write_text("x\n")
    start = snapshots.snapshot(repo)
    snapshots.commit_files(repo, source=start, paths=["x.txt"], author=("A", "a@x"), message="m")
    assert not marker.exists()


def test_the_temporary_index_keeps_the_real_ones_mtime(tmp_path: Path) -> None:
    # git re-hashes an entry as new as its index ("racily clean"); a copy with a fresh mtime
    # made git trust a same-size edit written in the same clock tick as the index.
    repo = make_repo(tmp_path / "repo")
    real = repo / ".git" / "index"
    os.utime(real, ns=(1_000_000_000, 1_000_000_000))
    with snapshots.temporary_index(real) as env:
        assert os.stat(env["GIT_INDEX_FILE"]).st_mtime_ns == 1_000_000_000
