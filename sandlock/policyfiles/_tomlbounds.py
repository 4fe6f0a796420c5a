"""Bounds on a policy file's TOML, checked before tomllib reads it.

tomllib recurses once per array or inline table nested in another (some 500 deep
are a RecursionError), and the time it takes for a dotted key grows with the square
of its parts (a ``[a.a.a...]`` header of 50,000 parts took 30 s; 100,000, minutes).
No policy nests more than two levels or dots more than three parts (``[process]
env = { CI = "1" }``, ``process.env.CI``), so a file past either bound below is not a
policy: it is refused at the line where it goes past, after one pass over its text
(linear in its size, which ``_file.MAX_SIZE`` bounds), before anything is built.

The pass reads any text, TOML or not: strings and comments are skipped as TOML
writes them, so that a bracket or a dot inside one does not count; whatever it
makes of invalid TOML, tomllib refuses next.
"""

from __future__ import annotations

import re

MAX_DEPTH = 16  # arrays and tables inside each other (a [table] header's brackets count)
MAX_PARTS = 16  # parts of one dotted key (dots counted anywhere outside strings)

_NOTABLE = re.compile(r"""[][{}=,.\n#"']""")
_OPENING = frozenset("[{")
_CLOSING = frozenset("]}")


def past_bounds(text: str) -> tuple[int, str] | None:
    """(line, what) of the first place ``text`` nests or dots past the bounds; None
    if it never does."""
    depth = dots = 0
    position = 0
    while (found := _NOTABLE.search(text, position)) is not None:
        char, position = found.group(), found.end()
        if char == ".":
            dots += 1
            if dots >= MAX_PARTS:
                return _line(text, position), f"a dotted key of more than {MAX_PARTS} parts"
            continue
        if char in "\"'":
            position = _string_end(text, found.start())
            continue
        if char == "#":
            end = text.find("\n", position)
            position = len(text) if end < 0 else end  # (the line end is read next)
            continue
        dots = 0
        if char in _OPENING:
            depth += 1
            if depth > MAX_DEPTH:
                return _line(text, position), (f"arrays or tables nested more than "
                                               f"{MAX_DEPTH} deep")
        elif char in _CLOSING:
            depth = max(depth - 1, 0)
    return None


def _string_end(text: str, start: int) -> int:
    """Where the string opening at ``start`` ends (after its closing quotes; at its
    line's end or the text's if it has none)."""
    quote = text[start]
    if text.startswith(quote * 3, start):
        end = _closing(text, start + 3, quote * 3, quote == '"', multiline=True)
        while end < len(text) and text[end] == quote and end - start < 8:
            end += 1  # up to two quotes of the content may precede the closing ones
        return end
    return _closing(text, start + 1, quote, quote == '"', multiline=False)


def _closing(text: str, position: int, closing: str, escapes: bool, multiline: bool) -> int:
    limit = len(text) if multiline else _line_end(text, position)
    close = text.find(closing, position, limit)
    while escapes:
        backslash = text.find("\\", position, limit if close < 0 else close)
        if backslash < 0:
            break
        position = backslash + 2  # the escaped character, whatever it is
        if close >= 0 and position > close:  # the closing quote was escaped: the next one
            close = text.find(closing, position, limit)
    return limit if close < 0 else close + len(closing)


def _line_end(text: str, position: int) -> int:
    end = text.find("\n", position)
    return len(text) if end < 0 else end


def _line(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1
