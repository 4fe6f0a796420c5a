"""Where tree-sitter's bash grammar reads a line otherwise than bash, read it again:
line continuations (bash joins the words they split), a line starting with a backslash
(bash runs it as a command of its own), and the text of heredocs (their backquoted
commands, which the grammar leaves as text); and where the grammar skips text that
bash reads, say so."""

from __future__ import annotations

import bisect
import re

from ._words import Piece, Word, joined

_HEREDOC_ESCAPE = re.compile(r"\\([$`\\\n])")
_BRACKET = re.compile(rb"[()]")


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
    leaves: list[tuple[int, int, bool]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.child_count == 0:
            leaves.append((node.start_byte, node.end_byte, node.type == "comment"))
        stack += node.children
    leaves.sort()
    starts = [start for start, _, _ in leaves]
    kept, position = [], 0
    for match in re.finditer(rb"\\\n", source):
        if _within(leaves, starts, match.start() + 1) or _within(leaves, starts, match.start(), True):
            continue  # the newline inside a token, or the backslash ending a comment
        if _backslashes_before(source, match.start() + 1) % 2 == 0:
            continue  # \\<newline>: an escaped backslash, then a newline
        kept.append(source[position:match.start()])
        position = match.end()
    return b"".join(kept) + source[position:]


def _within(leaves: list[tuple[int, int, bool]], starts: list[int], offset: int,
            comment: bool = False) -> bool:
    index = bisect.bisect_right(starts, offset) - 1
    return index >= 0 and leaves[index][0] <= offset < leaves[index][1] and (
        leaves[index][2] or not comment)


# Nodes whose whole text sandlock reads itself (by offsets, not by their children).
_READ_WHOLE = frozenset({"string", "raw_string", "ansi_c_string", "heredoc_body", "comment",
                         "translated_string", "regex", "extglob_pattern"})
_QUOTABLE = re.compile(rb"\\[ \t]|(?<![^\s])-(?=\s)")  # \\<space>, a lone -
_BEFORE_WORD = frozenset(bytes([char]) for char in b" \t\n;&|()<>")
_SKIPPABLE = re.compile(rb"(?:\s|\\.)*", re.DOTALL)  # whitespace, escapes (a word: _parse)


def _gaps(source: bytes, root: object) -> list[tuple[int, int]]:
    """The spans of ``source`` no token covers (the nodes read whole count as one)."""
    covered: list[tuple[int, int]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.child_count == 0 or node.type in _READ_WHOLE or (
                node.type == "command_substitution" and node.text.startswith(b"`")):
            covered.append((node.start_byte, node.end_byte))
        else:
            stack += node.children
    gaps, position = [], 0
    for start, end in sorted(covered) + [(len(source), len(source))]:
        if start > position:
            gaps.append((position, start))
        position = max(position, end)
    return gaps


def escaped_blanks(source: bytes, root: object) -> bytes:
    """``source`` with what the grammar skips between tokens quoted, which bash reads
    the same: an escaped space or tab (``\\ `` becomes ``' '``: the grammar reads a
    space, and a ``#`` after it as a comment, ``echo 'x'\\ #; cd /`` runs ``cd /``), and
    a lone ``-`` before a heredoc (``python3 - <<EOF``: the grammar drops it)."""
    kept, position = [], 0
    for start, end in _gaps(source, root):
        for match in _QUOTABLE.finditer(source, start, end):
            kept += [source[position:match.start()], b"'" + match.group()[-1:] + b"'"]
            position = match.end()
    return b"".join(kept) + source[position:] if kept else source


def comments_in_words(source: bytes, root: object) -> bytes:
    """``source`` with a ``#`` that does not begin a word escaped: bash reads it as a
    character of the word (``c#;cd`` runs ``c#`` then ``cd``), the grammar sometimes
    as a comment hiding the rest of the line."""
    if b"#" not in source:
        return source
    hashes: list[int] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "comment":
            if node.start_byte > 0 and source[node.start_byte - 1:node.start_byte] not in _BEFORE_WORD:
                hashes.append(node.start_byte)
        elif node.type not in _READ_WHOLE:
            stack += node.children
    kept, position = [], 0
    for offset in sorted(hashes):
        kept += [source[position:offset], b"\\"]
        position = offset
    return b"".join(kept) + source[position:]


def skipped(source: bytes, root: object) -> int | None:
    """The offset of the first text the grammar read as no token at all; None when
    every byte is in a token, a space, or an escape."""
    for start, end in _gaps(source, root):
        if not _SKIPPABLE.fullmatch(source, start, end):
            return _SKIPPABLE.match(source, start, end).end()
    return None


def _backslashes_before(source: bytes, end: int) -> int:
    start = end
    while start > 0 and source[start - 1:start] == b"\\":
        start -= 1
    return end - start


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


def bracket_depth(source: bytes) -> int:
    """How deep ( and ) nest, quotes not minded (a nest deeper than the walk goes is
    refused before the grammar's error recovery, which grows faster than the line)."""
    depth = deepest = 0
    for match in _BRACKET.finditer(source):
        depth += 1 if match[0] == b"(" else -1
        deepest = max(deepest, depth)
    return deepest


def read_write(node: object) -> bool:
    """A redirection ``<>``, which the grammar reads as ``<`` then an error."""
    kinds = [child.type for child in node.children]
    return "<" in kinds and kinds[kinds.index("<") + 1:kinds.index("<") + 2] == ["ERROR"] and \
        node.children[kinds.index("<") + 1].text == b">"


def first_error(node: object) -> str | None:
    """Where the grammar found the line not to be bash (the outermost place), if it did."""
    if not node.has_error:
        return None
    queue, skipped = [node], False
    for current in queue:  # breadth first: the outermost error
        if current.type == "command_substitution" and current.text.startswith(b"`") or \
                current.type == "file_redirect" and read_write(current):
            # `...` is read again once bash's backslashes are removed (_walk); <> is
            # bash's, read as a write
            skipped = True
            continue
        if current.type == "ERROR" or current.is_missing:
            return f"not valid bash at column {current.start_point[1] + 1}"
        queue += current.children
    return None if skipped else "not valid bash"
