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

import re
from dataclasses import dataclass, field

from ._reread import (bracket_depth, comments_in_words, escaped_blanks, first_error, heredoc,
                      heredoc_quoted, lines_apart, read_write, skipped, without_continuations)
from ._words import (Piece, Word, expanded_words, joined, locale_dollar, pieces, quoted_code,
                     single_word)

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
                         "variable_name", "regex"}
_BACKQUOTED_ESCAPE = re.compile(r"\\([$`\\])")
_GAP = re.compile(r"(\s+)|\\(.)", re.DOTALL)  # between children: spaces, skipped escapes
# Words bash reads as syntax where a command starts: the grammar making one a command
# means it read the line otherwise than bash does (``coproc X { cd /; }``).
_RESERVED = frozenset({"{", "}", "then", "fi", "do", "done", "esac", "elif", "else", "in",
                       "if", "while", "until", "for", "case", "select", "function", "[[",
                       "]]", "!"})
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
    # Words the grammar put in a statement's redirections, by the command they belong to.
    spilled: dict[tuple[int, int], list[list[Piece]]] = field(default_factory=dict)


def parse(line: str, *, depth: int = 0) -> Parsed:
    """``line``'s commands, redirections and assignments."""
    from ._grammar import parser  # tree-sitter: imported on first use only

    source = line.encode()
    if bracket_depth(source) > _DEPTH:  # refused by the walk anyway: spare the grammar's
        # error recovery, which grows faster than the line
        return Parsed((), (), f"nested more than {_DEPTH} levels deep: too deep to check")
    tree = parser().parse(source)
    for reread in (without_continuations, lines_apart, escaped_blanks, comments_in_words):
        changed = reread(source, tree.root_node)
        if changed != source:
            source, tree = changed, parser().parse(changed)
    error = first_error(tree.root_node)
    if error is not None:  # the verdict: nothing the walk finds outranks it
        return Parsed((), (), error)
    found = _Found()
    lost = skipped(source, tree.root_node)
    if lost is not None:
        found.errors.append(f"the grammar skips text bash reads at byte {lost + 1}")
    if depth > _NESTING:
        found.errors.append(f"substitutions nested more than {_NESTING} deep cannot be checked")
    else:
        _walk(tree.root_node, source, found, depth)
    return Parsed(tuple(found.commands), tuple(found.writes), next(iter(found.errors), None),
                  tuple(found.assignments), tuple(found.hidden))


def _walk(root: object, source: bytes, found: _Found, depth: int) -> None:
    # Each node comes with its parent: tree-sitter finds a node's parent by walking down
    # from the root, which a deep nest would make quadratic.
    stack = [(root, None, None, 0)]
    while stack:
        node, parent, stdin, level = stack.pop()
        kind = node.type
        if level > _DEPTH:
            found.errors.append(f"nested more than {_DEPTH} levels deep: too deep to check")
            return
        _record(node, parent, source, found, stdin)
        if kind == "heredoc_body" and not heredoc_quoted(parent, source):
            for text in heredoc(parent, source)[1]:  # `...` the grammar leaves as text
                _merge(found, parse(text, depth=depth + 1))
        children = node.children
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            inner = _redirected_input(node, source) or stdin
            _spill(node, body, source, found)
            stack += [(child, node, inner if child == body else stdin, level + 1)
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
            stack.append((child, node, PIPE if kind == "pipeline" and _after_pipe(child) else stdin,
                          level + 1))


def _spill(statement: object, body: object | None, source: bytes, found: _Found) -> None:
    """Words after a redirection's target are the command's (``sed > /dev/null -i f`` is
    ``sed -i f``): the grammar puts them in the redirection."""
    words = [group for child in statement.children_by_field_name("redirect")
             for group in _redirect_parts(child, source)[1]]
    if not words:
        return
    if body is None or body.type != "command":
        found.errors.append("words after the redirection of a compound command")
    else:
        found.spilled[(body.start_byte, body.end_byte)] = words


def _after_pipe(child: object) -> bool:
    previous = child.prev_sibling
    return child.is_named and previous is not None and previous.type in ("|", "|&")


def _record(node: object, parent: object | None, source: bytes, found: _Found,
            stdin: Input | None) -> None:
    kind = node.type
    if kind == "command":
        command = _simple(node, source, stdin, spilled=found.spilled.get((node.start_byte, node.end_byte), []))
        if command is not None:
            found.commands.append(command)
        if _ends_inside(node, source):
            found.errors.append("a newline inside a command as the grammar reads it (after "
                                "== or =~): bash ends the command there")
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
    elif kind == "heredoc_redirect" and not _heredoc_delimited(node):
        found.errors.append("a heredoc the grammar reads otherwise than bash (its delimiter)")
    elif kind == "file_redirect":
        target = _redirect_target(node, source) or _read_write_target(node, source)
        if target is not None:
            found.writes.append(target)
    elif kind in _WORDLIKE and parent is not None and parent.type not in _INSIDE_WORD:
        code = quoted_code(node, source)
        if code is not None:
            found.hidden.append(code)


def _simple(node: object, source: bytes, stdin: Input | None, keyword: str = "",
            spilled: list[list[Piece]] = ()) -> Command | None:
    """A simple command (or a declaration: ``keyword`` is declare, export...), its words
    as bash splits them: children that touch are one word (the grammar splits ``'c'\\d``,
    which is ``cd``, in two; ``x='a'\\b`` is an assignment only), and the escapes it
    skips between them (``\\ ``) are characters of a word."""
    argv: list[list[Piece]] = []
    assignments: list[tuple[str, list[Piece]]] = []
    herestring: list[Piece] | None = None
    current: list[Piece] | None = None  # the word a touching child or escape continues
    children = node.children[1:] if keyword else node.children  # past declare, export...
    end = node.children[0].end_byte if keyword else node.start_byte
    for child in children:
        current = _between(source[end:child.start_byte], current, argv)
        end = child.end_byte
        if child.type in _JOINABLE or not child.is_named:
            if current is None:
                current = []
                argv.append(current)
            current += [] if locale_dollar(child) else pieces(child, source)
            continue
        current = None
        if child.type in ("herestring_redirect", "file_redirect"):
            target, extra = _redirect_parts(child, source)
            argv += extra
            if child.type == "herestring_redirect":
                herestring = current = list(target or [])  # touching words continue it
            else:
                stdin = _file_input(child, source) or stdin
        elif child.type == "variable_assignment":
            name = child.child_by_field_name("name")
            value = child.child_by_field_name("value")
            current = pieces(value, source) if value is not None else []
            assignments.append((_node_text(name, source) if name else "", current))
    words = [Word(keyword)] if keyword else []
    words += [word for group in [*argv, *spilled] for word in expanded_words(group)]
    if not words:
        return None
    if herestring is not None:
        stdin = Input("text", joined(herestring or [("", False, False)]))
    return Command(tuple(words), stdin, tuple((name, joined(value or [("", False, False)]))
                                             for name, value in assignments))


def _ends_inside(node: object, source: bytes) -> bool:
    """Whether an unquoted newline lies between two parts of a simple command: bash ends
    the command there, the grammar read on (``echo ==<newline>cd /``)."""
    children = node.children
    return any(b"\n" in source[before.end_byte:after.start_byte]
               for before, after in zip(children, children[1:]))


def _between(gap: bytes, current: list[Piece] | None, argv: list[list[Piece]]) -> list[Piece] | None:
    """Read the text between two children (spaces, and escapes the grammar skipped):
    the word the next child continues, if it touches one."""
    for match in _GAP.finditer(gap.decode(errors="replace")):
        if match.group(1) is not None:  # whitespace ends a word
            current = None
            continue
        if current is None:
            current = []
            argv.append(current)
        current.append((match.group(2), False, False))
    return current


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
            stdin = Input("text", heredoc(child, source)[0])
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
    parts = _redirect_parts(node, source)[0]
    if operator == "<&" or parts is None:
        return Input("file")
    return Input("file", joined(parts))


def _heredoc_delimited(node: object) -> bool:
    """Whether the heredoc ends at its own delimiter, as bash reads it (``--<<E`` made
    the grammar take a later line for part of the heredoc's end)."""
    start = next((c.text for c in node.children if c.type == "heredoc_start"), b"")
    end = next((c.text for c in node.children if c.type == "heredoc_end"), None)
    delimiter = re.sub(rb"\\(.)|['\"]", lambda m: m.group(1) or b"", start)
    return b"<" not in start and (end is None or end == delimiter)


def _redirect_parts(node: object, source: bytes) -> tuple[list[Piece] | None, list[list[Piece]]]:
    """A redirection's target (a here-string's text; none for a heredoc or ``>&-``), and
    the words after it, which bash gives the command."""
    groups: list[list[Piece]] = []
    current, end = None, None
    for child in node.named_children:
        if child.type not in _JOINABLE or child.type == "file_descriptor":
            current, end = None, child.end_byte
            continue
        current = _between(source[end:child.start_byte], current, groups) if end is not None else None
        if current is None:
            current = []
            groups.append(current)
        current += pieces(child, source)
        end = child.end_byte
    operator = next((c.type for c in node.children if not c.is_named), "")
    if node.type == "heredoc_redirect" or operator.endswith("-") or not groups:
        return None, groups
    return groups[0], groups[1:]


def _redirect_target(node: object, source: bytes) -> str | None:
    """The file an output redirection writes; None for input, descriptor duplication
    (2>&1, >&-) and /dev/null."""
    operator = next((c.type for c in node.children if not c.is_named), "")
    if operator not in _OUTPUT_OPERATORS:
        return None
    parts = _redirect_parts(node, source)[0]
    if parts is None:
        return "?"  # a target the grammar did not read: a file for all vet knows
    target = joined(parts)
    if operator == ">&" and (target.isdigit() or target == "-"):
        return None
    return None if target in _NOT_FILES else str(target)


def _read_write_target(node: object, source: bytes) -> str | None:
    """``<> FILE`` opens FILE for reading and writing (creating it); the grammar does
    not know the operator and reads ``<`` then an error."""
    if not read_write(node):
        return None
    parts = _redirect_parts(node, source)[0]
    return str(joined(parts)) if parts is not None else "?"


def _merge(found: _Found, inner: Parsed) -> None:
    found.commands += inner.commands
    found.writes += inner.writes
    found.assignments += inner.assignments
    found.hidden += inner.hidden
    if inner.syntax_error:
        found.errors.append(inner.syntax_error)
