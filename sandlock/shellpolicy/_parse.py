"""A bash command line -> the simple commands it would run, where each reads its input
from, the variables it sets, and the files it would write through redirections, in
sandlock's own small terms (never parser nodes).

Parsed with tree-sitter's bash grammar (tree-sitter and tree-sitter-bash: MIT, with
wheels for every platform sandlock runs on; bashlex, the pure-Python alternative, is
GPLv3). Every command of the tree counts: in pipelines, lists, subshells, groups,
conditionals, loops, functions, and command or process substitutions. Where the
grammar reads bash differently, the line is first made what bash reads (line
continuations joined) or the difference is refused (a reserved word as a command).
The tree is walked with a stack, never recursion: nesting costs no Python frames.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from ._words import Piece, Word, expanded_words, joined, pieces, quoted_code, single_word

# Redirection operators that write (or may create) their target file. ">&" is
# bash's other spelling of "&>" unless its target is a descriptor (2) or "-".
_OUTPUT_OPERATORS = frozenset({">", ">>", ">|", "&>", "&>>", ">&"})
# Targets that are not files in the workspace: discarding, or the command's own output.
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_WORDLIKE = frozenset({"word", "string", "raw_string", "ansi_c_string", "translated_string",
                       "concatenation", "number"})
_INSIDE_WORD = frozenset({"concatenation", "string", "translated_string", "command_name"})
_JOINABLE = _WORDLIKE | {"command_name", "simple_expansion", "expansion", "command_substitution",
                         "process_substitution", "arithmetic_expansion", "brace_expression",
                         "variable_name"}
_BACKQUOTED_ESCAPE = re.compile(r"\\([$`\\])")
_ESCAPES_ONLY = re.compile(rb"(?:\\[^\n])*")
# Words bash reads as syntax where a command starts: the grammar making one a command
# means it read the line otherwise than bash does (``coproc X { cd /; }``).
_RESERVED = frozenset({"{", "}", "then", "fi", "do", "done", "esac", "elif", "else", "in",
                       "if", "while", "until", "for", "case", "select", "function", "[[",
                       "]]", "!"})
_HEREDOC_ESCAPE = re.compile(r"\\([$`\\\n])")
_NESTING = 8  # heredocs holding backquotes holding heredocs...: deeper is refused
_DEPTH = 300  # levels of the tree (a substitution is three): deeper is refused, not walked


@dataclass(frozen=True)
class Input:
    """Where a command's standard input comes from, when the line says: "text" (a
    heredoc or here-string, ``text`` its value), "pipe", "file" (``text`` the path,
    None for a duplicated descriptor)."""

    kind: str
    text: Word | None = None


PIPE = Input("pipe")


@dataclass(frozen=True)
class Command:
    """One simple command: its words as bash would pass them, what it reads on its
    standard input, and the variables set for it (``NAME=value cmd``)."""

    argv: tuple[Word, ...]
    stdin: Input | None = None
    assignments: tuple[tuple[str, Word], ...] = ()


@dataclass(frozen=True)
class Parsed:
    commands: tuple[Command, ...]
    writes: tuple[str, ...]  # redirection targets that are files
    syntax_error: str | None  # where the command stops being bash, if it does
    assignments: tuple[tuple[str, Word], ...] = ()  # NAME=value of the shell itself
    hidden: tuple[str, ...] = ()  # quoted texts holding substitutions bash may evaluate


@dataclass
class _Found:
    commands: list[Command] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    assignments: list[tuple[str, Word]] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse(line: str, *, depth: int = 0) -> Parsed:
    """``line``'s commands, redirections and assignments."""
    from ._grammar import parser  # tree-sitter: imported on first use only

    source = line.encode()
    tree = parser().parse(source)
    for reread in (_without_continuations, _lines_apart):
        changed = reread(source, tree.root_node)
        if changed != source:
            source, tree = changed, parser().parse(changed)
    found = _Found()
    if depth > _NESTING:
        found.errors.append(f"substitutions nested more than {_NESTING} deep cannot be checked")
    else:
        _walk(tree.root_node, source, found, depth)
    error = _first_error(tree.root_node)
    return Parsed(tuple(found.commands), tuple(found.writes), error or next(iter(found.errors), None),
                  tuple(found.assignments), tuple(found.hidden))


def _walk(root: object, source: bytes, found: _Found, depth: int) -> None:
    stack = [(root, None, 0)]
    while stack:
        node, stdin, level = stack.pop()
        kind = node.type
        if level > _DEPTH:
            found.errors.append(f"nested more than {_DEPTH} levels deep: too deep to check")
            return
        _record(node, source, found, stdin)
        if kind == "heredoc_body" and not _heredoc_quoted(node.parent, source):
            for text in _heredoc(node.parent, source)[1]:  # `...` the grammar leaves as text
                _merge(found, parse(text, depth=depth + 1))
        children = node.children
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            inner = _redirected_input(node, source) or stdin
            stack += [(child, inner if child == body else stdin, level + 1)
                      for child in reversed(children)]
            continue
        if kind == "command_substitution" and source[node.start_byte:node.start_byte + 1] == b"`":
            # bash removes the backslashes of \$ \` \\ before it reads `...`
            inner = _BACKQUOTED_ESCAPE.sub(r"\1", _node_text(node, source)[1:-1])
            _merge(found, parse(inner, depth=depth + 1))
            continue
        if kind == "process_substitution" and source[node.start_byte:node.start_byte + 2] == b">(":
            stdin = PIPE  # >(cmd) reads what the command writes
        for child in reversed(children):  # popped in order
            stack.append((child, PIPE if kind == "pipeline" and _after_pipe(child) else stdin,
                          level + 1))


def _after_pipe(child: object) -> bool:
    previous = child.prev_sibling
    return child.is_named and previous is not None and previous.type in ("|", "|&")


def _record(node: object, source: bytes, found: _Found, stdin: Input | None) -> None:
    kind = node.type
    parent = node.parent
    if kind == "command":
        command = _simple(node, source, stdin)
        if command is not None:
            found.commands.append(command)
        name = node.child_by_field_name("name")
        if name is not None and name.named_child_count == 1 and name.named_children[0].type == "word":
            text = source[name.start_byte:name.end_byte].decode(errors="replace")
            if text in _RESERVED:
                found.errors.append(f"'{text}' where bash expects a command (the line is "
                                    "not read as bash reads it)")
    elif kind in ("declaration_command", "unset_command"):
        command = _simple(node, source, stdin, keyword=_node_text(node.children[0], source))
        if command is not None:
            found.commands.append(command)
    elif kind == "variable_assignment" and parent.type not in ("command", "declaration_command"):
        found.assignments += _assignments(parent, source, only=node)
    elif kind == "file_redirect":
        target = _redirect_target(node, source) or _read_write_target(node, source)
        if target is not None:
            found.writes.append(target)
    elif kind in _WORDLIKE and parent is not None and parent.type not in _INSIDE_WORD:
        code = quoted_code(node, source)
        if code is not None:
            found.hidden.append(code)


def _simple(node: object, source: bytes, stdin: Input | None, keyword: str = "") -> Command | None:
    """A simple command (or a declaration: ``keyword`` is declare, export...). Children
    that touch, or are apart by escaped characters only, are one word for bash: the
    grammar splits ``'c'\\d`` (which is ``cd``) in two, drops the ``\\ `` of ``'r'\\ x``,
    and ``x='a'\\b`` is an assignment only."""
    argv: list[list[Piece]] = []
    assignments: list[tuple[str, list[Piece]]] = []
    herestring: list[Piece] | None = None
    current: list[Piece] | None = None
    end = -1
    for child in node.named_children:
        gap = source[end:child.start_byte] if current is not None else b" "
        if child.type in _JOINABLE and _ESCAPES_ONLY.fullmatch(gap):
            current += _escaped(gap) + pieces(child, source)
            end = child.end_byte
            continue
        end, current = child.end_byte, None
        if child.type == "herestring_redirect":
            herestring = current = [p for value in child.named_children[:1] for p in pieces(value, source)]
        elif child.type == "file_redirect":
            stdin = _file_input(child, source) or stdin
        elif child.type == "variable_assignment":
            name = child.child_by_field_name("name")
            value = child.child_by_field_name("value")
            current = pieces(value, source) if value is not None else []
            assignments.append((_node_text(name, source) if name else "", current))
        elif child.type in _JOINABLE:
            current = pieces(child, source)
            argv.append(current)
    words = [Word(keyword)] if keyword else []
    words += [word for group in argv for word in expanded_words(group)]
    if not words:
        return None
    if herestring is not None:
        stdin = Input("text", joined(herestring or [("", False, False)]))
    return Command(tuple(words), stdin, tuple((name, joined(value or [("", False, False)]))
                                             for name, value in assignments))


def _escaped(gap: bytes) -> list[Piece]:
    return [(char, False, False) for char in gap.decode(errors="replace")[1::2]]


def _node_text(node: object, source: bytes) -> str:
    return source[node.start_byte:node.end_byte].decode(errors="replace")


def _assignments(node: object, source: bytes, only: object = None) -> tuple[tuple[str, Word], ...]:
    found = []
    for child in node.named_children:
        if child.type != "variable_assignment" or (only is not None and child != only):
            continue
        name = child.child_by_field_name("name")
        value = child.child_by_field_name("value")
        text = _node_text(name, source) if name else ""
        found.append((text, single_word(value, source) if value is not None else Word("")))
    return tuple(found)


def _redirected_input(node: object, source: bytes) -> Input | None:
    """The standard input a statement's redirections give it (the last one wins)."""
    stdin = None
    for child in node.children_by_field_name("redirect"):
        if _descriptor(child, source) not in ("", "0"):
            continue
        if child.type == "heredoc_redirect":
            stdin = Input("text", _heredoc(child, source)[0])
        elif child.type == "herestring_redirect":
            stdin = _string_input(child, source)
        elif child.type == "file_redirect":
            stdin = _file_input(child, source) or stdin
    return stdin


def _descriptor(node: object, source: bytes) -> str:
    descriptor = node.child_by_field_name("descriptor")
    return "" if descriptor is None else source[descriptor.start_byte:descriptor.end_byte].decode()


def _string_input(node: object, source: bytes) -> Input:
    value = next((child for child in node.named_children), None)
    return Input("text", single_word(value, source) if value is not None else Word(""))


def _file_input(node: object, source: bytes) -> Input | None:
    operator = next((c.type for c in node.children if not c.is_named), "")
    if _descriptor(node, source) not in ("", "0") or operator not in ("<", "<&"):
        return None
    destination = node.child_by_field_name("destination")
    if operator == "<&" or destination is None:
        return Input("file")
    return Input("file", single_word(destination, source))


def _heredoc_quoted(node: object, source: bytes) -> bool:
    start = next((c for c in node.children if c.type == "heredoc_start"), None)
    text = source[start.start_byte:start.end_byte].decode() if start is not None else ""
    return any(char in text for char in "'\"\\")


def _heredoc(node: object, source: bytes) -> tuple[Word, list[str]]:
    """A heredoc's text as the command reads it, and the backquoted commands in it
    (which bash runs when the delimiter is unquoted; the grammar leaves them as text)."""
    body = next((c for c in node.children if c.type == "heredoc_body"), None)
    if body is None:
        return Word(""), []
    tabs = any(c.type == "<<-" for c in node.children)
    raw = source[body.start_byte:body.end_byte].decode(errors="replace")
    if _heredoc_quoted(node, source):
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


def _heredoc_text(text: str, backquoted: list[str]) -> list[tuple[str, bool, bool]]:
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


def _redirect_target(node: object, source: bytes) -> str | None:
    """The file an output redirection writes; None for input, descriptor duplication
    (2>&1, >&-) and /dev/null."""
    operator = next((c.type for c in node.children if not c.is_named), "")
    destination = node.child_by_field_name("destination")
    if destination is None or operator not in _OUTPUT_OPERATORS:
        return None
    target = single_word(destination, source)
    if operator == ">&" and (target.isdigit() or target == "-"):
        return None
    return None if target in _NOT_FILES else str(target)


def _read_write_target(node: object, source: bytes) -> str | None:
    """``<> FILE`` opens FILE for reading and writing (creating it); the grammar does
    not know the operator and reads ``<`` then an error."""
    if not _read_write(node):
        return None
    destination = node.child_by_field_name("destination")
    return str(single_word(destination, source)) if destination is not None else "?"


def _read_write(node: object) -> bool:
    kinds = [child.type for child in node.children]
    return "<" in kinds and kinds[kinds.index("<") + 1:kinds.index("<") + 2] == ["ERROR"] and \
        node.children[kinds.index("<") + 1].text == b">"


def _merge(found: _Found, inner: Parsed) -> None:
    found.commands += inner.commands
    found.writes += inner.writes
    found.assignments += inner.assignments
    found.hidden += inner.hidden
    if inner.syntax_error:
        found.errors.append(inner.syntax_error)


def _lines_apart(source: bytes, root: object) -> bytes:
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


def _without_continuations(source: bytes, root: object) -> bytes:
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


def _first_error(node: object) -> str | None:
    if not node.has_error:
        return None
    queue, skipped = [node], False
    for current in queue:  # breadth first: the outermost error
        if current.type == "command_substitution" and current.text.startswith(b"`") or \
                current.type == "file_redirect" and _read_write(current):
            # `...` is read again once bash's backslashes are removed (_walk); <> is
            # bash's, read as a write
            skipped = True
            continue
        if current.type == "ERROR" or current.is_missing:
            return f"not valid bash at column {current.start_point[1] + 1}"
        queue += current.children
    return None if skipped else "not valid bash"
