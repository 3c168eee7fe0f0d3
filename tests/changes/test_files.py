"""The file browser's endpoints: listing, reading, highlighting, and everything that must 404."""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from promptmgr.models import Conversation, Project
from promptmgr.services import files as files_service
from promptmgr.workspaces import workspace_path
from tests.changes.support import make_repo, run_git
from tests.helpers import make_project

pytestmark = pytest.mark.unit

ClientFor = Callable[[Any], Client]


def listing(client: Client, conversation: Conversation, path: str = "") -> Any:
    return client.get(f"/api/conversations/{conversation.pk}/files", {"path": path})


def content(client: Client, conversation: Conversation, path: str) -> Any:
    return client.get(f"/api/conversations/{conversation.pk}/files/content", {"path": path})


def test_a_folder_lists_folders_first_and_hides_git(
    client_for: ClientFor, conversation: Conversation, alice: Any
) -> None:
    response = listing(client_for(alice), conversation)
    assert response.status_code == 200
    body = response.json()
    assert body["path"] == ""
    assert [(e["name"], e["type"]) for e in body["entries"]] == [
        ("docs", "dir"),
        ("src", "dir"),
        ("README.md", "file"),
    ]
    assert body["entries"][2] == {"name": "README.md", "path": "README.md", "type": "file", "size": 7}
    nested = listing(client_for(alice), conversation, "src").json()
    assert [e["path"] for e in nested["entries"]] == ["src/app.py"]


def test_a_file_comes_back_with_its_language_and_highlighted_lines(
    client_for: ClientFor, conversation: Conversation, bob: Any
) -> None:
    body = content(client_for(bob), conversation, "src/app.py").json()
    assert body["path"] == "src/app.py"
    assert body["content"] == "def main():\n    return 1\n"
    assert body["language"] == "Python"
    assert (body["size"], body["binary"], body["truncated"]) == (25, False, False)
    assert body["html"].count('<span class="ln">') == 2
    assert '<span class="hl-k">def</span>' in body["html"]


def test_uncommitted_work_in_the_worktree_is_what_the_browser_shows(
    client_for: ClientFor, conversation: Conversation, worktree: Path, alice: Any
) -> None:
    (worktree / "README.md").write_text("# Changed <b>\n")
    body = content(client_for(alice), conversation, "README.md").json()
    assert body["content"] == "# Changed <b>\n"
    assert "<b>" not in body["html"] and "&lt;b&gt;" in body["html"]


@pytest.mark.parametrize(
    "path", ["../secret.txt", "src/../../secret.txt", "/etc/passwd", ".git/config", "src/.git", "nope.txt"]
)
def test_paths_that_leave_the_tree_or_name_git_are_404(
    client_for: ClientFor, conversation: Conversation, tmp_path: Path, alice: Any, path: str
) -> None:
    (tmp_path / "secret.txt").write_text("secret\n")
    client = client_for(alice)
    response = content(client, conversation, path)
    assert response.status_code == 404
    assert response.json() == {"detail": files_service.MSG_NO_SUCH_PATH, "code": "not_found"}
    assert listing(client, conversation, path).status_code == 404


def test_symlinks_that_lead_outside_are_404_and_those_inside_are_followed(
    client_for: ClientFor, conversation: Conversation, worktree: Path, tmp_path: Path, alice: Any
) -> None:
    (tmp_path / "secret.txt").write_text("secret\n")
    (worktree / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (worktree / "escape-dir").symlink_to(tmp_path)
    (worktree / "git-link").symlink_to(worktree / ".git")
    (worktree / "inside.md").symlink_to("docs/guide.md")
    client = client_for(alice)

    for path in ("escape.txt", "escape-dir/secret.txt", "git-link/config"):
        assert content(client, conversation, path).status_code == 404, path
    assert listing(client, conversation, "escape-dir").status_code == 404
    assert content(client, conversation, "inside.md").json()["content"] == "Guide\n"
    types = {e["name"]: e["type"] for e in listing(client, conversation).json()["entries"]}
    assert types["escape.txt"] == "symlink" and types["inside.md"] == "symlink"


def test_a_file_over_one_mib_is_truncated(
    client_for: ClientFor, conversation: Conversation, worktree: Path, alice: Any
) -> None:
    (worktree / "big.txt").write_text("é" * (files_service.MAX_FILE_BYTES // 2 + 10))
    body = content(client_for(alice), conversation, "big.txt").json()
    assert body["truncated"] is True
    assert body["binary"] is False  # the cut went through a two-byte character
    assert body["size"] == files_service.MAX_FILE_BYTES + 20
    assert len(body["content"].encode()) == files_service.MAX_FILE_BYTES


def test_binaries_are_detected_and_sent_without_content(
    client_for: ClientFor, conversation: Conversation, worktree: Path, alice: Any
) -> None:
    (worktree / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    (worktree / "latin1.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    client = client_for(alice)
    for name in ("logo.png", "latin1.txt"):
        body = content(client, conversation, name).json()
        assert (body["binary"], body["content"], body["html"], body["language"]) == (True, "", "", ""), name


def test_strangers_and_anonymous_users_get_404_and_401(
    client_for: ClientFor, conversation: Conversation, project: Project, carol: Any
) -> None:
    stranger = client_for(carol)
    urls = [
        f"/api/conversations/{conversation.pk}/files",
        f"/api/conversations/{conversation.pk}/files/content?path=README.md",
        f"/api/conversations/{conversation.pk}/files/zip",
        f"/api/projects/{project.pk}/files",
        f"/api/projects/{project.pk}/files/content?path=README.md",
    ]
    for url in urls:
        assert stranger.get(url).status_code == 404, url
        assert Client().get(url).status_code == 401, url


def test_the_project_browser_reads_the_default_branch_from_git_objects(
    client_for: ClientFor, alice: Any
) -> None:
    project = make_project(owner=alice, sync=False)
    root = workspace_path(project)
    make_repo(root, {"README.md": "committed\n", "lib/util.py": "X = 1\n"})
    run_git(root, "checkout", "-q", "-b", "feature")
    (root / "README.md").write_text("uncommitted on another branch\n")
    (root / "lib" / "link.py").symlink_to("util.py")
    (root / "out.txt").symlink_to("/etc/hostname")
    run_git(root, "add", "-A")
    run_git(root, "commit", "-q", "-m", "links")
    run_git(root, "checkout", "-q", "main")
    Project.objects.filter(pk=project.pk).update(default_branch="feature")
    client = client_for(alice)

    top = client.get(f"/api/projects/{project.pk}/files").json()
    assert [(e["name"], e["type"]) for e in top["entries"]] == [
        ("lib", "dir"),
        ("out.txt", "symlink"),
        ("README.md", "file"),
    ]
    lib = client.get(f"/api/projects/{project.pk}/files", {"path": "lib"}).json()
    assert [(e["path"], e["type"]) for e in lib["entries"]] == [
        ("lib/link.py", "symlink"),
        ("lib/util.py", "file"),
    ]
    read = client.get(f"/api/projects/{project.pk}/files/content", {"path": "lib/link.py"}).json()
    assert (read["content"], read["language"]) == ("X = 1\n", "Python")
    readme = client.get(f"/api/projects/{project.pk}/files/content", {"path": "README.md"}).json()
    assert readme["content"] == "uncommitted on another branch\n"  # what the branch holds
    for path in ("out.txt", "../x", "lib/../../x", "missing.md"):
        assert client.get(f"/api/projects/{project.pk}/files/content", {"path": path}).status_code == 404


def test_a_project_whose_workspace_is_no_repository_is_browsed_as_a_folder(
    client_for: ClientFor, project: Project, alice: Any
) -> None:
    (workspace_path(project) / "notes.txt").write_text("plain folder\n")
    body = client_for(alice).get(f"/api/projects/{project.pk}/files/content", {"path": "notes.txt"}).json()
    assert body["content"] == "plain folder\n"


def test_the_zip_holds_what_git_would_commit_and_no_file_from_outside(worktree: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("secret\n")
    (worktree / ".gitignore").write_text(".env\n")
    (worktree / ".env").write_text("TOKEN=x\n")
    (worktree / "new.txt").write_text("untracked but not ignored\n")
    (worktree / "link").symlink_to(tmp_path / "secret.txt")
    # A tracked folder replaced by a symlink to the outside: its tracked files must not be read.
    run_git(worktree, "mv", "docs", "docs-old")
    run_git(worktree, "commit", "-q", "-m", "move")
    run_git(worktree, "rm", "-q", "--cached", "-r", "docs-old")
    os.rename(worktree / "docs-old", tmp_path / "docs-outside")
    (tmp_path / "docs-outside" / "guide.md").write_text("outside\n")
    run_git(worktree, "mv", "src", "src2")
    data = b"".join(files_service.zip_chunks(files_service.FolderTree(worktree)))

    archive = zipfile.ZipFile(io.BytesIO(data))
    names = sorted(archive.namelist())
    assert names == [".gitignore", "README.md", "link", "new.txt", "src2/app.py"]
    assert archive.read("src2/app.py") == b"def main():\n    return 1\n"
    assert archive.read("link") == str(tmp_path / "secret.txt").encode()  # the link, not the file
    assert archive.getinfo("link").external_attr >> 16 & 0o170000 == 0o120000


def test_a_plain_folder_zips_every_file_and_stores_symlinked_folders_as_links(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.txt").write_text("a\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "config").write_text("not shown\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    (folder / "linked").symlink_to(tmp_path / "outside")

    data = b"".join(files_service.zip_chunks(files_service.FolderTree(folder)))

    archive = zipfile.ZipFile(io.BytesIO(data))
    assert sorted(archive.namelist()) == ["linked", "sub/a.txt"]
    assert archive.read("linked") == str(tmp_path / "outside").encode()
