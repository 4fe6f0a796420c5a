"""Where things are in a TOML text: the line of each key, table header and array item.

tomllib returns values without positions, and an error in a policy file must say
FILE:LINE. This scanner only reads text that tomllib has already accepted, so it
needs to find where each statement and value starts, never to validate anything.
"""

from __future__ import annotations

import tomllib
from bisect import bisect_right

Path = tuple[str | int, ...]

_BARE_KEY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_SCALAR_END = frozenset(",]}\n#")


def locate(text: str) -> dict[Path, int]:
    """The 1-based line of every key, table header and array item of ``text`` (valid
    TOML), by path: ``("network", "allow")`` for a key, ``("network", "allow", 0)`` for
    its first item. The first definition of a path wins. Never raises: on anything
    unexpected the lines found so far are returned (callers fall back to coarser ones)."""
    scanner = _Scanner(text)
    try:
        scanner.document()
    except (IndexError, ValueError, tomllib.TOMLDecodeError):
        pass
    return scanner.found


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.found: dict[Path, int] = {}
        self._line_starts = [0] + [i + 1 for i, char in enumerate(text) if char == "\n"]

    def document(self) -> None:
        table: Path = ()
        while True:
            self._skip(newlines=True)
            if self.pos >= len(self.text):
                return
            if self._peek() == "[":
                table = self._header()
            else:
                self._key_value(table)

    # --- statements ----------------------------------------------------------------

    def _header(self) -> Path:
        """``[a.b]`` or ``[[a.b]]``: the path of the table that follows."""
        line = self._line()
        double = self.text.startswith("[[", self.pos)
        self.pos += 2 if double else 1
        path = self._key()
        self._record(path, line)
        self._skip(newlines=False)
        self.pos += 2 if double else 1
        return path

    def _key_value(self, table: Path) -> None:
        line = self._line()
        path = table + self._key()
        self._record(path, line)
        self._skip(newlines=False)
        self._expect("=")
        self._value(path)

    def _key(self) -> Path:
        """A dotted key: bare and quoted parts separated by dots."""
        parts: list[str] = []
        while True:
            self._skip(newlines=False)
            parts.append(self._key_part())
            self._skip(newlines=False)
            if self._peek() != ".":
                return tuple(parts)
            self.pos += 1

    def _key_part(self) -> str:
        start = self.pos
        char = self._peek()
        if char in "\"'":
            self._string()
            # tomllib decodes the quoted key's escapes exactly as it did the first time.
            return next(iter(tomllib.loads(self.text[start:self.pos] + " = 0")))
        while self.pos < len(self.text) and self.text[self.pos] in _BARE_KEY:
            self.pos += 1
        if self.pos == start:
            raise ValueError(f"no key at offset {start}")
        return self.text[start:self.pos]

    # --- values ----------------------------------------------------------------------

    def _value(self, path: Path) -> None:
        self._skip(newlines=False)
        char = self._peek()
        if char in "\"'":
            self._string()
        elif char == "[":
            self._array(path)
        elif char == "{":
            self._inline_table(path)
        else:  # number, boolean, date: up to a delimiter (dates may hold a space)
            while self.pos < len(self.text) and self.text[self.pos] not in _SCALAR_END:
                self.pos += 1

    def _array(self, path: Path) -> None:
        self.pos += 1
        index = 0
        while True:
            self._skip(newlines=True)
            if self._peek() == "]":
                self.pos += 1
                return
            self._record(path + (index,), self._line())
            self._value(path + (index,))
            self._skip(newlines=True)
            if self._peek() == ",":
                self.pos += 1
            index += 1

    def _inline_table(self, path: Path) -> None:
        self.pos += 1
        while True:
            self._skip(newlines=True)
            if self._peek() == "}":
                self.pos += 1
                return
            if self._peek() == ",":
                self.pos += 1
                continue
            self._key_value(path)

    def _string(self) -> None:
        quote = self._peek()
        if self.text.startswith(quote * 3, self.pos):
            self.pos += 3
            self._until(quote * 3, escapes=quote == '"')
            while self._peek() == quote:  # up to two quotes may end the content
                self.pos += 1
        else:
            self.pos += 1
            self._until(quote, escapes=quote == '"')

    def _until(self, closing: str, escapes: bool) -> None:
        while not self.text.startswith(closing, self.pos):
            if self.pos >= len(self.text):
                raise ValueError("unterminated string")
            self.pos += 2 if escapes and self.text[self.pos] == "\\" else 1
        self.pos += len(closing)

    # --- helpers ---------------------------------------------------------------------

    def _skip(self, newlines: bool) -> None:
        """Whitespace and comments (and line ends, where TOML allows them)."""
        blank = " \t\r\n" if newlines else " \t"
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            elif char in blank:
                self.pos += 1
            else:
                return

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            raise ValueError(f"expected {char!r} at offset {self.pos}")
        self.pos += 1

    def _line(self) -> int:
        return bisect_right(self._line_starts, self.pos)

    def _record(self, path: Path, line: int) -> None:
        """``path`` and the tables its dotted parts imply (``[a.b]`` defines ``a`` too);
        a path recorded before has its prefixes recorded with it (the first wins)."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.found:
                return
            self.found[path[:end]] = line
