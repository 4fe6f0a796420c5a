"""A bash command line -> the simple commands it would run and the files it would
write through redirections, in sandlock's own small terms (never parser nodes).

Parsed with tree-sitter's bash grammar (tree-sitter and tree-sitter-bash: MIT, with
wheels for every platform sandlock runs on; bashlex, the pure-Python alternative, is
GPLv3). Every command of the tree counts: in pipelines, lists, subshells, groups,
conditionals, loops, functions, and command or process substitutions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Redirection operators that write (or may create) their target file. ">&" is
# bash's other spelling of "&>" unless its target is a descriptor (2) or "-".
_OUTPUT_OPERATORS = frozenset({">", ">>", ">|", "&>", "&>>", ">&"})
# Targets that are not files in the workspace: discarding, or the command's own output.
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


@dataclass(frozen=True)
class Command:
    """One simple command: its words as the shell would see them (quotes removed where
    that is certain; expansions kept as written)."""

    argv: tuple[str, ...]


@dataclass(frozen=True)
class Parsed:
    commands: tuple[Command, ...]
    writes: tuple[str, ...]  # redirection targets that are files
    syntax_error: str | None  # where the command stops being bash, if it does


def parse(line: str) -> Parsed:
    from ._grammar import parser  # tree-sitter: imported on first use only

    source = line.encode()
    tree = parser().parse(source)
    commands: list[Command] = []
    writes: list[str] = []
    _walk(tree.root_node, source, commands, writes)
    return Parsed(tuple(commands), tuple(writes), _first_error(tree.root_node))


def _walk(node: object, source: bytes, commands: list[Command], writes: list[str]) -> None:
    if node.type == "command":
        argv = tuple(_word(child, source) for child in node.named_children
                     if child.type not in ("variable_assignment", "file_redirect"))
        if argv:
            commands.append(Command(argv))
    elif node.type == "file_redirect":
        target = _redirect_target(node, source)
        if target is not None:
            writes.append(target)
    for child in node.children:
        _walk(child, source, commands, writes)


def _redirect_target(node: object, source: bytes) -> str | None:
    """The file an output redirection writes; None for input, descriptor duplication
    (2>&1, >&-) and /dev/null."""
    operator = next((c.type for c in node.children if not c.is_named), "")
    destination = node.child_by_field_name("destination")
    if destination is None or operator not in _OUTPUT_OPERATORS:
        return None
    target = _word(destination, source)
    if operator == ">&" and (target.isdigit() or target == "-"):
        return None
    return None if target in _NOT_FILES else target


def _word(node: object, source: bytes) -> str:
    """A word as the shell would pass it, as far as that is certain without running
    anything: quotes and backslashes removed (\\rm and r"m" are rm); expansions are
    kept as written ("$f" is $f)."""
    text = source[node.start_byte:node.end_byte].decode(errors="replace")
    if node.type in ("command_name", "concatenation"):
        return "".join(_word(child, source) for child in node.children) or text
    if node.type == "word":
        return _ESCAPE.sub(r"\1", text)
    if node.type == "raw_string":
        return text[1:-1]
    if node.type == "ansi_c_string":
        return text[2:-1]
    if node.type == "string":
        return text[1:-1]
    return text


def _first_error(node: object) -> str | None:
    if not node.has_error:
        return None
    stack = [node]
    while stack:
        current = stack.pop(0)
        if current.type == "ERROR" or current.is_missing:
            return f"not valid bash at column {current.start_point[1] + 1}"
        stack.extend(current.children)
    return "not valid bash"
