"""Browsing a conversation's worktree or a project's default branch, and zipping a worktree.

A path is always relative to the tree's root: ``..``, an absolute path, a ``.git``
component, or a symlink whose target lies outside the root all answer 404, exactly as a
missing file does, so nothing outside the worktree can be read or even confirmed to
exist. Files over ``MAX_FILE_BYTES`` come back truncated; binaries are detected (a NUL
byte, or text that is not UTF-8) and sent without content.

Two kinds of tree: a folder on disk (``FolderTree``: a worktree, with the user's and
Claude's uncommitted work) and a commit's tree in a repository (``CommitTree``: the
project's default branch, read from git objects, so no checkout is needed).
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from core.errors import NotFound
from promptmgr import snapshots
from promptmgr.highlight import code_html, language_of
from promptmgr.models import Conversation, Project
from promptmgr.services.runs import conversation_visible, project_visible
from promptmgr.workspaces import workspace_path

MAX_FILE_BYTES = 1024 * 1024
MAX_ENTRIES = 5000  # entries listed per folder
BINARY_SNIFF_BYTES = 8000  # git's own heuristic: a NUL byte in the first 8,000 bytes
MAX_SYMLINK_HOPS = 8
ZIP_CHUNK = 256 * 1024

MSG_NO_SUCH_PATH = "No such file or folder."


@dataclass(frozen=True)
class Entry:
    name: str
    path: str
    type: str  # dir | file | symlink | submodule
    size: int | None


@dataclass(frozen=True)
class Listing:
    path: str
    entries: list[Entry]
    truncated: bool


@dataclass(frozen=True)
class FileContent:
    path: str
    size: int
    binary: bool
    truncated: bool
    content: str
    language: str
    html: str


class Tree(Protocol):
    def listing(self, path: str) -> Listing: ...

    def content(self, path: str) -> FileContent: ...

    def zip_chunks(self) -> Iterator[bytes]: ...


def clean_parts(path: str) -> tuple[str, ...]:
    """The path's components, or NotFound for anything that could leave the tree."""
    if "\0" in path or path.startswith("/"):
        raise NotFound(MSG_NO_SUCH_PATH)
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if any(p in ("..", ".git") for p in parts):
        raise NotFound(MSG_NO_SUCH_PATH)
    return parts


def _sorted(entries: list[Entry]) -> tuple[list[Entry], bool]:
    entries.sort(key=lambda e: (e.type != "dir", e.name.lower(), e.name))
    return entries[:MAX_ENTRIES], len(entries) > MAX_ENTRIES


def file_content(path: str, size: int, head: bytes) -> FileContent:
    """What the viewer shows of a file whose first bytes (at most MAX_FILE_BYTES + 1) are ``head``."""
    truncated = len(head) > MAX_FILE_BYTES or size > MAX_FILE_BYTES
    data = head[:MAX_FILE_BYTES]
    binary = b"\0" in data[:BINARY_SNIFF_BYTES]
    text = ""
    if not binary:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            # A cut through a multi-byte character at the limit is not a binary file.
            if truncated and exc.start >= len(data) - 3:
                text = data[: exc.start].decode("utf-8", "replace")
            else:
                binary = True
    language = "" if binary else language_of(path)
    return FileContent(
        path=path,
        size=size,
        binary=binary,
        truncated=truncated,
        content=text,
        language=language,
        html="" if binary else code_html(path, text),
    )


class FolderTree:
    """A folder on disk: a conversation's worktree (or, before it has one, the workspace)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.real_root = root.resolve()

    def resolve(self, path: str) -> tuple[str, Path]:
        """The clean relative path and the real file it names, inside the root, or NotFound."""
        parts = clean_parts(path)
        try:
            real = self.root.joinpath(*parts).resolve(strict=True)
            inside = real.relative_to(self.real_root)
        except (OSError, RuntimeError, ValueError):  # missing, a symlink loop, or outside
            raise NotFound(MSG_NO_SUCH_PATH) from None
        if ".git" in inside.parts:
            raise NotFound(MSG_NO_SUCH_PATH)
        return "/".join(parts), real

    def listing(self, path: str) -> Listing:
        clean, real = self.resolve(path)
        if not real.is_dir():
            raise NotFound(MSG_NO_SUCH_PATH)
        entries = []
        with os.scandir(real) as scan:
            for item in scan:
                if item.name == ".git":
                    continue
                kind = _kind(item)
                if kind is None:
                    continue
                size = item.stat(follow_symlinks=False).st_size if kind == "file" else None
                entries.append(Entry(item.name, posixpath.join(clean, item.name), kind, size))
        shown, truncated = _sorted(entries)
        return Listing(path=clean, entries=shown, truncated=truncated)

    def content(self, path: str) -> FileContent:
        clean, real = self.resolve(path)
        if not real.is_file():
            raise NotFound(MSG_NO_SUCH_PATH)
        with open(real, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(MAX_FILE_BYTES + 1)
        return file_content(clean, size, head)

    def files(self) -> Iterator[str]:
        """The files a download holds: what git would commit (tracked and not ignored), or
        every file when the folder is not a git work tree."""
        if snapshots.work_tree_root(self.root) is not None:
            out = snapshots.git(self.root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
            seen: set[str] = set()
            for raw in out.split(b"\0"):
                name = raw.decode("utf-8", "surrogateescape")
                if name and name not in seen:
                    seen.add(name)
                    yield name
            return
        for folder, dirs, names in os.walk(self.root):
            relative = Path(folder).relative_to(self.root)
            # os.walk does not enter symlinked folders; they are stored as the links they are.
            links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
            dirs[:] = sorted(d for d in dirs if d != ".git" and d not in links)
            for name in sorted(names + links):
                yield (relative / name).as_posix()

    def zip_chunks(self) -> Iterator[bytes]:
        return zip_chunks(self)

    def holds(self, path: Path) -> bool:
        """Whether ``path``'s folder really lies inside the root (no symlinked folder on the way)."""
        try:
            inside = path.parent.resolve().relative_to(self.real_root)
        except (OSError, RuntimeError, ValueError):
            return False
        return ".git" not in inside.parts


def _kind(item: os.DirEntry[str]) -> str | None:
    if item.is_symlink():
        return "symlink"
    if item.is_dir(follow_symlinks=False):
        return "dir"
    if item.is_file(follow_symlinks=False):
        return "file"
    return None  # sockets, fifos, devices: nothing to show


class CommitTree:
    """A commit's tree in a repository: the project's default branch, from git objects."""

    def __init__(self, repo: Path, commit: str) -> None:
        self.repo = repo
        self.commit = commit

    def _ls(self, path: str, *, children: bool) -> list[tuple[str, str, str, int | None, str]]:
        """``(mode, type, oid, size, path)`` of the entry at ``path`` or of its children."""
        spec = [f"{path}/"] if children and path else ([path] if path else [])
        out = snapshots.git(self.repo, "ls-tree", "-z", "-l", "--full-tree", self.commit, "--", *spec)
        rows = []
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, name = record.split(b"\t", 1)
            mode, kind, oid, size = meta.decode().split()
            rows.append(
                (mode, kind, oid, None if size == "-" else int(size), name.decode("utf-8", "replace"))
            )
        return rows

    def _entry(self, parts: tuple[str, ...]) -> tuple[str, tuple[str, str, str, int | None, str] | None]:
        """Follow symlinks (inside the tree only) to the entry a path names."""
        path = "/".join(parts)
        for _ in range(MAX_SYMLINK_HOPS):
            if not path:
                return "", None  # the root
            rows = self._ls(path, children=False)
            if len(rows) != 1 or rows[0][4] != path:
                raise NotFound(MSG_NO_SUCH_PATH)
            row = rows[0]
            if row[0] != "120000":
                return path, row
            target = snapshots.git(self.repo, "cat-file", "blob", row[2]).decode("utf-8", "replace")
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            if target.startswith("/") or joined == ".." or joined.startswith("../"):
                raise NotFound(MSG_NO_SUCH_PATH)
            path = "/".join(clean_parts("" if joined == "." else joined))
        raise NotFound(MSG_NO_SUCH_PATH)

    def listing(self, path: str) -> Listing:
        parts = clean_parts(path)
        real, row = self._entry(parts)
        if row is not None and row[1] != "tree":
            raise NotFound(MSG_NO_SUCH_PATH)
        entries = []
        for mode, kind, _oid, size, name in self._ls(real, children=True):
            entry_type = {"tree": "dir", "commit": "submodule"}.get(
                kind, "symlink" if mode == "120000" else "file"
            )
            entries.append(
                Entry(
                    posixpath.basename(name), "/".join((*parts, posixpath.basename(name))), entry_type, size
                )
            )
        shown, truncated = _sorted(entries)
        return Listing(path="/".join(parts), entries=shown, truncated=truncated)

    def content(self, path: str) -> FileContent:
        parts = clean_parts(path)
        _real, row = self._entry(parts)
        if row is None or row[1] != "blob":
            raise NotFound(MSG_NO_SUCH_PATH)
        head, _cut = snapshots.git_limited(self.repo, "cat-file", "blob", row[2], limit=MAX_FILE_BYTES + 1)
        return file_content("/".join(parts), row[3] or 0, head)

    def zip_chunks(self) -> Iterator[bytes]:
        # git writes the zip itself, streamed as it goes; only the commit's objects are read.
        return snapshots.git_stream(self.repo, "archive", "--format=zip", self.commit)


# --- Which tree ----------------------------------------------------------------------------


def conversation_root(conversation: Conversation) -> Path:
    """Where the conversation's runs work: its worktree, or (before it has one) the folder its
    latest run worked in, or the project's workspace."""
    if conversation.worktree_path:
        return Path(conversation.worktree_path)
    latest = conversation.runs.exclude(workdir="").order_by("-pk").values_list("workdir", flat=True).first()
    return Path(latest) if latest else workspace_path(conversation.project)


def conversation_tree(*, user: Any, conversation_id: int) -> Tree:
    """The conversation's worktree; once the idle sweep removed it, its branch (the sweep
    commits uncommitted work there first), until its next run makes the worktree again."""
    conversation = conversation_visible(user=user, conversation_id=conversation_id)
    root = conversation_root(conversation)
    if not root.is_dir() and conversation.branch:
        branch = commit_tree(workspace_path(conversation.project), f"refs/heads/{conversation.branch}")
        if branch is not None:
            return branch
    return FolderTree(root)


def project_tree(*, user: Any, project_id: int) -> Tree:
    """The project's default branch from its repository; a workspace that is not (yet) a git
    repository is shown as the folder it is."""
    project = project_visible(user=user, project_id=project_id)
    return default_branch_tree(project)


def default_branch_tree(project: Project) -> Tree:
    root = workspace_path(project)
    return commit_tree(root, project.default_branch or "HEAD") or FolderTree(root)


def commit_tree(repo: Path, ref: str) -> CommitTree | None:
    """The tree of ``ref`` in the repository at ``repo``, or None when there is none."""
    if not repo.is_dir():
        return None
    # git never looks above ``repo`` (snapshots.git_env), so this is its own repository.
    out = snapshots.git(repo, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False)
    commit = out.decode().strip()
    return CommitTree(repo, commit) if commit else None


# --- Download ------------------------------------------------------------------------------


class _Sink(io.RawIOBase):
    """Where the zip is written: collects bytes until the stream takes them."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.chunks.append(chunk)
        self.size += len(chunk)
        return len(chunk)

    def take(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks, self.size = [], 0
        return data


def zip_chunks(tree: FolderTree) -> Iterator[bytes]:
    """The folder as a zip, produced file by file: memory stays at about one chunk.

    Symlinks are stored as links (their target, not what they point to), so a link to a
    file outside the folder adds nothing of that file.
    """
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name in tree.files():
            path = tree.root / name
            if not tree.holds(path):
                continue  # a folder replaced by a symlink to somewhere else
            try:
                info = os.lstat(path)
            except OSError:
                continue  # tracked but deleted in the worktree
            entry = zipfile.ZipInfo(name)
            entry.date_time = _zip_time(info.st_mtime)
            if stat.S_ISLNK(info.st_mode):
                entry.external_attr = (stat.S_IFLNK | 0o777) << 16
                archive.writestr(entry, os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                entry.external_attr = (info.st_mode & 0xFFFF) << 16
                entry.compress_type = zipfile.ZIP_DEFLATED
                entry.file_size = info.st_size
                with open(path, "rb") as source, archive.open(entry, "w") as target:
                    while block := source.read(ZIP_CHUNK):
                        target.write(block)
                        if sink.size >= ZIP_CHUNK:
                            yield sink.take()
            if sink.size >= ZIP_CHUNK:
                yield sink.take()
    yield sink.take()


def _zip_time(mtime: float) -> tuple[int, int, int, int, int, int]:
    stamp = time.localtime(max(mtime, 315532800))  # zip cannot say anything before 1980
    return (stamp.tm_year, stamp.tm_mon, stamp.tm_mday, stamp.tm_hour, stamp.tm_min, stamp.tm_sec)
