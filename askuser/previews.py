"""What a permission card shows, and the rule "Always allow" would add.

Pure functions over a tool call (its name and input). Edits are shown as a unified diff
against the file as it is now, read only when the file lies inside the run's working
directory: a card must never reveal a file outside the project, whatever path Claude names.

Rules are only *suggested* here; the CLI matches them (they go into the workspace's
``permissions.allow`` and into the running turn's ``updatedPermissions``). A Bash rule is
never the bare tool name, and a command with shell operators gets an exact rule, never a
prefix that a chained command could ride on.
"""

from __future__ import annotations

import difflib
import json
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from core.tool_names import FILE_EDIT_TOOLS

MAX_FILE_BYTES = 1024 * 1024
MAX_PREVIEW_CHARS = 200_000
EDIT_TOOLS = frozenset({"Edit", "MultiEdit"})
READ_ONLY_TOOLS = frozenset({"Read", "Glob", "Grep", "LS", "NotebookRead", "TodoWrite"})
SHELL_OPERATORS = ("&&", "||", ";", "|", ">", "<", "`", "$(", "\n", "&")
# What PermissionRequest.suggested_rule and PermissionRule.rule hold (PostgreSQL refuses more).
MAX_RULE_CHARS = 500


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def file_path(tool_input: dict[str, Any]) -> str:
    """The file a file tool's call is about ("" when it names none)."""
    return _text(tool_input.get("file_path") or tool_input.get("notebook_path"))


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)[:MAX_PREVIEW_CHARS]


def _inside(root: Path | None, path: str) -> Path | None:
    """The file, resolved, if it lies inside ``root``; None otherwise."""
    if root is None or not path:
        return None
    try:
        resolved = (root / path).resolve()
        if resolved.is_relative_to(root.resolve()):
            return resolved
    except (OSError, ValueError):
        pass
    return None


def _current(root: Path | None, path: str) -> str | None:
    """The file's text now, or None when it does not exist, is outside, binary or too large."""
    file = _inside(root, path)
    if file is None or not file.is_file():
        return None
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            return None
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _display_path(root: Path | None, path: str) -> str:
    file = _inside(root, path)
    if file is not None and root is not None:
        return str(file.relative_to(root.resolve()))
    return path


def unified_diff(path: str, before: str, after: str) -> tuple[str, int, int]:
    """The diff text and its added and removed line counts."""
    lines = list(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
        )
    )
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    text = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    return text[:MAX_PREVIEW_CHARS], added, removed


def _edits(tool_name: str, tool_input: dict[str, Any]) -> list[tuple[str, str, bool]]:
    if tool_name == "MultiEdit":
        raw = tool_input.get("edits")
        edits = raw if isinstance(raw, list) else []
    else:
        edits = [tool_input]
    return [
        (_text(e.get("old_string")), _text(e.get("new_string")), bool(e.get("replace_all")))
        for e in edits
        if isinstance(e, dict)
    ]


def _apply(text: str, edits: list[tuple[str, str, bool]]) -> str | None:
    for old, new, replace_all in edits:
        if not old or old not in text:
            return None
        text = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    return text


def _edit_preview(tool_name: str, tool_input: dict[str, Any], root: Path | None) -> dict[str, Any]:
    path = _text(tool_input.get("file_path"))
    shown = _display_path(root, path)
    edits = _edits(tool_name, tool_input)
    current = _current(root, path)
    after = _apply(current, edits) if current is not None else None
    if current is None or after is None:
        # No readable file to diff against: the replaced and replacing text alone.
        before = "".join(old + ("" if old.endswith("\n") else "\n") for old, _new, _all in edits)
        after_text = "".join(new + ("" if new.endswith("\n") else "\n") for _old, new, _all in edits)
        diff, added, removed = unified_diff(shown, before, after_text)
    else:
        diff, added, removed = unified_diff(shown, current, after)
    return {"type": "diff", "path": shown, "diff": diff, "additions": added, "deletions": removed}


def _write_preview(tool_input: dict[str, Any], root: Path | None) -> dict[str, Any]:
    path = _text(tool_input.get("file_path"))
    shown = _display_path(root, path)
    content = _text(tool_input.get("content"))
    current = _current(root, path)
    if current is None:
        return {"type": "write", "path": shown, "content": content[:MAX_PREVIEW_CHARS]}
    diff, added, removed = unified_diff(shown, current, content)
    return {"type": "diff", "path": shown, "diff": diff, "additions": added, "deletions": removed}


def preview(tool_name: str, tool_input: dict[str, Any], root: Path | None) -> dict[str, Any]:
    """The card's rendering of a tool call (shapes: see the permission_request event)."""
    if tool_name == "Bash":
        return {
            "type": "bash",
            "command": _text(tool_input.get("command"))[:MAX_PREVIEW_CHARS],
            "description": _text(tool_input.get("description")),
        }
    if tool_name in EDIT_TOOLS:
        return _edit_preview(tool_name, tool_input, root)
    if tool_name == "Write":
        return _write_preview(tool_input, root)
    if tool_name == "WebFetch":
        return {"type": "url", "url": _text(tool_input.get("url")), "prompt": _text(tool_input.get("prompt"))}
    if tool_name.startswith("mcp__") and tool_name.count("__") >= 2:
        _prefix, server, tool = tool_name.split("__", 2)
        return {"type": "mcp", "server": server, "tool": tool, "arguments": tool_input}
    return {"type": "json", "json": _pretty(tool_input)}


def _bash_rule(command: str) -> str | None:
    command = command.strip()
    if not command:
        return None
    if any(op in command for op in SHELL_OPERATORS):
        # Exact: a prefix rule for a compound command would be broader than what was approved.
        return f"Bash({command})"
    try:
        words = shlex.split(command)
    except ValueError:
        return f"Bash({command})"
    if not words:
        return None
    # "npm test", "git log", "make check": the command and its subcommand; else the command.
    prefix = (
        words[:2]
        if len(words) > 1 and words[1].replace("-", "").isalnum() and words[1][0] != "-"
        else words[:1]
    )
    return f"Bash({' '.join(prefix)}:*)"


def suggested_rule(tool_name: str, tool_input: dict[str, Any], root: Path | None) -> str | None:
    """The allow rule "Always allow" adds for this call, or None when there is no safe one,
    or it would be longer than a rule may be (an exact rule for a long compound command:
    the card then offers to allow it once)."""
    rule = _suggested_rule(tool_name, tool_input, root)
    return rule if rule is not None and len(rule) <= MAX_RULE_CHARS else None


def _suggested_rule(tool_name: str, tool_input: dict[str, Any], root: Path | None) -> str | None:
    if tool_name == "Bash":
        return _bash_rule(_text(tool_input.get("command")))
    if tool_name in FILE_EDIT_TOOLS:
        path = file_path(tool_input)
        inside = _inside(root, path)
        if inside is None or root is None:
            return None  # only files of this workspace are ever always-allowed
        return f"Edit({inside.relative_to(root.resolve())})"
    if tool_name == "WebFetch":
        host = urlsplit(_text(tool_input.get("url"))).hostname
        return f"WebFetch(domain:{host})" if host else None
    if tool_name.startswith("mcp__") or tool_name in READ_ONLY_TOOLS:
        return tool_name
    return None
