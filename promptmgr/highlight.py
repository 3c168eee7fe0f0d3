"""Syntax highlighting on the server, with Pygments: HTML with token classes, never styles.

Each line of code becomes ```<span class="ln">…</span>`` (the page numbers them with a CSS
counter), so long files need no script to show line numbers. Pygments closes and reopens
its spans at every line end, so splitting its output at newlines keeps the HTML balanced.
``static/css/code.css`` colours the token classes for the light and the dark theme.
"""

from __future__ import annotations

import html
import re

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

MAX_HIGHLIGHT_BYTES = 512 * 1024  # larger texts are shown plain: Pygments would take seconds
# Token classes with the prefix the chat's Markdown uses too (promptmgr/markdown.py).
_FORMATTER = HtmlFormatter(nowrap=True, classprefix="hl-")
_DIFF_FILE = re.compile(r"^diff --git a/(.*?) b/", re.M)


def lexer_for(path: str) -> Lexer:
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def language_of(path: str) -> str:
    """The language's human name ("Python", "Text only")."""
    return str(lexer_for(path).name)


def highlight_lines(path: str, text: str) -> list[str]:
    """One balanced HTML fragment per line of ``text``, coloured for ``path``'s language."""
    if len(text) > MAX_HIGHLIGHT_BYTES:
        return [html.escape(line) for line in text.split("\n")]
    out = highlight(text, lexer_for(path), _FORMATTER)
    lines = out.split("\n")
    count = text.count("\n") + 1
    return (lines + [""] * count)[:count]


def code_html(path: str, text: str) -> str:
    """A file's text as numbered, highlighted lines (a trailing newline adds no empty line)."""
    if text.endswith("\n"):
        text = text[:-1]
    return "".join(f'<span class="ln">{line}</span>' for line in highlight_lines(path, text))


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _line_kinds(lines: list[str]) -> list[str]:
    """``meta``, ``hunk``, ``add``, ``del`` or ``ctx`` per line, counting each hunk's lines
    (so a deleted line that reads ``-- x`` is not taken for a ``--- a/…`` header)."""
    kinds = []
    old_left = new_left = 0
    for line in lines:
        if old_left > 0 or new_left > 0:
            kind = {"+": "add", "-": "del", " ": "ctx"}.get(line[:1], "meta")
            old_left -= kind in ("del", "ctx")
            new_left -= kind in ("add", "ctx")
            kinds.append(kind)
            continue
        match = _HUNK.match(line)
        if match:
            old_left = int(match.group(1) or 1)
            new_left = int(match.group(2) or 1)
            kinds.append("hunk")
        else:
            kinds.append("meta")
    return kinds


def _file_diff_html(path: str, section: str) -> str:
    lines = section.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    kinds = _line_kinds(lines)
    # The code of every +/-/context line, lexed together so multi-line strings and
    # comments keep their colour across lines; the diff's own lines stay plain.
    code_rows = [i for i, kind in enumerate(kinds) if kind in ("add", "del", "ctx")]
    coloured = highlight_lines(path, "\n".join(lines[i][1:] for i in code_rows))
    by_row = dict(zip(code_rows, coloured, strict=True))
    rows = []
    for i, (line, kind) in enumerate(zip(lines, kinds, strict=True)):
        body = html.escape(line[:1]) + by_row[i] if i in by_row else html.escape(line)
        rows.append(f'<span class="ln d-{kind}">{body}</span>')
    return "".join(rows)


def diff_html(diff: str) -> str:
    """A unified diff as lines marked added/deleted/context, each file's code highlighted."""
    if not diff:
        return ""
    starts = [m.start() for m in _DIFF_FILE.finditer(diff)] or [0]
    if starts[0] != 0:
        starts.insert(0, 0)
    parts = []
    for begin, end in zip(starts, [*starts[1:], len(diff)], strict=True):
        section = diff[begin:end]
        match = _DIFF_FILE.match(section)
        parts.append(_file_diff_html(match.group(1) if match else "", section))
    return "".join(parts)
