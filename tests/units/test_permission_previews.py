"""What a permission card shows for each tool, and which rule "Always allow" would add."""

from __future__ import annotations

from pathlib import Path

import pytest

from askuser.models import PermissionRequest
from askuser.previews import MAX_RULE_CHARS, preview, suggested_rule
from promptmgr.models import PermissionRule

pytestmark = pytest.mark.unit


def test_bash_shows_the_command_and_its_description() -> None:
    shown = preview("Bash", {"command": "npm test", "description": "Run the tests"}, None)
    assert shown == {"type": "bash", "command": "npm test", "description": "Run the tests"}


def test_an_edit_is_a_unified_diff_against_the_file_in_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# Title\nold line\nlast\n")
    edit = {"file_path": str(tmp_path / "README.md"), "old_string": "old line", "new_string": "new line"}

    shown = preview("Edit", edit, tmp_path)

    assert shown["type"] == "diff"
    assert shown["path"] == "README.md"
    assert (shown["additions"], shown["deletions"]) == (1, 1)
    assert shown["diff"].splitlines() == [
        "--- a/README.md",
        "+++ b/README.md",
        "@@ -1,3 +1,3 @@",
        " # Title",
        "-old line",
        "+new line",
        " last",
    ]


def test_a_multi_edit_applies_every_edit_in_order(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    edits = [{"old_string": "x = 1", "new_string": "x = 10"}, {"old_string": "y = 2", "new_string": "y = 20"}]

    shown = preview("MultiEdit", {"file_path": str(tmp_path / "a.py"), "edits": edits}, tmp_path)

    assert [
        line for line in shown["diff"].splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ] == [
        "-x = 1",
        "-y = 2",
        "+x = 10",
        "+y = 20",
    ]


def test_a_file_outside_the_workspace_is_never_read_for_a_diff(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "other"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("context before\nTOKEN=abc\ncontext after\n")
    edit = {"file_path": str(outside / "secret.txt"), "old_string": "TOKEN=abc", "new_string": "TOKEN=x"}

    shown = preview("Edit", edit, workspace)

    assert "context" not in shown["diff"]
    assert "-TOKEN=abc" in shown["diff"] and "+TOKEN=x" in shown["diff"]


def test_a_symlink_leading_out_of_the_workspace_is_not_followed(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "secret.txt").write_text("above\nkey\nbelow\n")
    (workspace / "link.txt").symlink_to(tmp_path / "secret.txt")

    shown = preview(
        "Edit", {"file_path": str(workspace / "link.txt"), "old_string": "key", "new_string": "k"}, workspace
    )

    assert "above" not in shown["diff"]


def test_writing_a_new_file_previews_its_content_and_overwriting_one_is_a_diff(tmp_path: Path) -> None:
    new = preview("Write", {"file_path": str(tmp_path / "new.txt"), "content": "hello\n"}, tmp_path)
    assert new == {"type": "write", "path": "new.txt", "content": "hello\n"}

    (tmp_path / "old.txt").write_text("before\n")
    over = preview("Write", {"file_path": str(tmp_path / "old.txt"), "content": "after\n"}, tmp_path)
    assert over["type"] == "diff" and "-before" in over["diff"] and "+after" in over["diff"]


def test_web_fetch_mcp_and_unknown_tools_have_their_own_shapes() -> None:
    assert preview("WebFetch", {"url": "https://example.com/a", "prompt": "p"}, None) == {
        "type": "url",
        "url": "https://example.com/a",
        "prompt": "p",
    }
    assert preview("mcp__github__create_issue", {"title": "t"}, None) == {
        "type": "mcp",
        "server": "github",
        "tool": "create_issue",
        "arguments": {"title": "t"},
    }
    unknown = preview("SomethingNew", {"b": [1, 2], "a": None}, None)
    assert unknown == {"type": "json", "json": '{\n  "a": null,\n  "b": [\n    1,\n    2\n  ]\n}'}


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("npm test", "Bash(npm test:*)"),
        ("git log --oneline -5", "Bash(git log:*)"),
        ("ls -la", "Bash(ls:*)"),
        ("pytest", "Bash(pytest:*)"),
        # Compound commands get an exact rule: a prefix would cover whatever is chained after it.
        ("git log && rm -rf /", "Bash(git log && rm -rf /)"),
        ("echo hi; curl evil", "Bash(echo hi; curl evil)"),
        ("cat x | sh", "Bash(cat x | sh)"),
        ("echo $(whoami)", "Bash(echo $(whoami))"),
    ],
)
def test_bash_rules_are_a_command_prefix_or_exact_never_the_bare_tool(command: str, rule: str) -> None:
    assert suggested_rule("Bash", {"command": command}, None) == rule


def test_a_rule_longer_than_a_rule_may_be_is_not_suggested() -> None:
    # An exact rule for a long compound command: the card offers Allow once and Deny only.
    assert suggested_rule("Bash", {"command": "make && " + "x" * 600}, None) is None
    longest = "make && " + "x" * (MAX_RULE_CHARS - len("Bash(make && )"))
    assert suggested_rule("Bash", {"command": longest}, None) == f"Bash({longest})"
    fields = [PermissionRequest._meta.get_field("suggested_rule"), PermissionRule._meta.get_field("rule")]
    assert [field.max_length for field in fields] == [MAX_RULE_CHARS, MAX_RULE_CHARS]


def test_file_rules_name_a_file_of_the_workspace_and_nothing_outside(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    assert suggested_rule("Edit", {"file_path": str(tmp_path / "src" / "a.py")}, tmp_path) == "Edit(src/a.py)"
    assert suggested_rule("Write", {"file_path": "/etc/passwd"}, tmp_path) is None
    assert suggested_rule("Edit", {"file_path": str(tmp_path / "x")}, None) is None


def test_other_rules_are_scoped_to_a_domain_or_a_tool() -> None:
    assert (
        suggested_rule("WebFetch", {"url": "https://docs.python.org/3/"}, None)
        == "WebFetch(domain:docs.python.org)"
    )
    assert suggested_rule("mcp__github__create_issue", {}, None) == "mcp__github__create_issue"
    assert suggested_rule("Bash", {"command": "  "}, None) is None
    assert suggested_rule("SomethingNew", {}, None) is None
