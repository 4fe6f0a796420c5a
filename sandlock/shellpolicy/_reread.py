"""Where tree-sitter's bash grammar reads a line otherwise than bash, read it again:
line continuations (bash joins the words they split), a line starting with a backslash
(bash runs it as a command of its own), and the text of heredocs (their backquoted
commands, which the grammar leaves as text)."""

from __future__ import annotations

import bisect
import re

from ._words import Piece, Word, joined

_HEREDOC_ESCAPE = re.compile(r"\\([$`\\\n])")


def lines_apart(source: bytes, root: object) -> bytes:
    """``source`` with a space after each newline the grammar put inside a word: a
    line starting with a backslash (``echo a<newline>\\cd /``) is a command of its own
    for bash, the grammar reads it as more arguments; the space changes nothing for
    bash and lets the grammar see the line."""
    if b"\n" not in source:
        return source
    newlines: list[int] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "word" and b"\n" in node.text:
            text = node.text
            newlines += [node.start_byte + index + 1 for index in range(len(text))
                         if text[index:index + 1] == b"\n" and text[index - 1:index] != b"\\"]
        elif node.type not in ("heredoc_body", "raw_string", "string", "comment"):
            stack += node.children
    kept, position = [], 0
    for newline in sorted(newlines):
        kept += [source[position:newline], b" "]
        position = newline
    return b"".join(kept) + source[position:]


def without_continuations(source: bytes, root: object) -> bytes:
    """``source`` with the line continuations (backslash-newline between tokens)
    removed: bash joins what they split (``c\\<newline>d /`` is ``cd /``), the
    grammar reads them as spaces. Those inside quotes, comments and heredocs stay."""
    if b"\\\n" not in source:
        return source
    leaves: list[tuple[int, int]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.child_count == 0:
            leaves.append((node.start_byte, node.end_byte))
        stack += node.children
    leaves.sort()
    starts = [start for start, _ in leaves]
    kept, position = [], 0
    for match in re.finditer(rb"\\\n", source):
        index = bisect.bisect_right(starts, match.start()) - 1
        if index >= 0 and leaves[index][0] <= match.start() < leaves[index][1]:
            continue  # inside a token: its reading handles it
        kept.append(source[position:match.start()])
        position = match.end()
    return b"".join(kept) + source[position:]



def heredoc_quoted(node: object, source: bytes) -> bool:
    start = next((c for c in node.children if c.type == "heredoc_start"), None)
    text = source[start.start_byte:start.end_byte].decode() if start is not None else ""
    return any(char in text for char in "'\"\\")


def heredoc(node: object, source: bytes) -> tuple[Word, list[str]]:
    """A heredoc's text as the command reads it, and the backquoted commands in it
    (which bash runs when the delimiter is unquoted; the grammar leaves them as text)."""
    body = next((c for c in node.children if c.type == "heredoc_body"), None)
    if body is None:
        return Word(""), []
    tabs = any(c.type == "<<-" for c in node.children)
    raw = source[body.start_byte:body.end_byte].decode(errors="replace")
    if heredoc_quoted(node, source):
        return Word(_strip_tabs(raw) if tabs else raw), []
    parts, backquoted, position = [], [], body.start_byte
    for child in body.named_children:
        if child.type == "heredoc_content":
            continue
        parts += _heredoc_text(source[position:child.start_byte].decode(errors="replace"), backquoted)
        parts.append((source[child.start_byte:child.end_byte].decode(errors="replace"), False, True))
        position = child.end_byte
    parts += _heredoc_text(source[position:body.end_byte].decode(errors="replace"), backquoted)
    word = joined(parts)
    return Word(_strip_tabs(word) if tabs else word, word.literal), backquoted


def _heredoc_text(text: str, backquoted: list[str]) -> list[Piece]:
    """Literal heredoc text: escapes removed, `...` runtime (its command collected)."""
    parts = []
    for index, segment in enumerate(re.split(r"(?<!\\)`", text)):
        if index % 2:
            backquoted.append(segment.replace("\\`", "`").replace("\\$", "$").replace("\\\\", "\\"))
            parts.append((f"`{segment}`", False, True))
        else:
            parts.append((_HEREDOC_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1),
                                              segment), False, False))
    return parts


def _strip_tabs(text: str) -> str:
    return "\n".join(line.lstrip("\t") for line in text.split("\n"))
