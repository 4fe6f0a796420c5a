"""What an overlayfs upper layer changes in the directory it was mounted over: A
added, M modified, D deleted, one line per path (``_walk`` compares the two trees;
``Listing`` records what it finds, ``_commit`` applies it). And what a workspace's
files add up to, counted against --max-disk.
"""

from __future__ import annotations

import stat

from .._record import record
from ._walk import SETID, Node, Walk, is_special

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from collections.abc import Iterable

_UNITS = "KMGTPE"
DROPPED = "set-id bits and file capabilities dropped"
_SPECIAL = {stat.S_IFIFO: "a fifo", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device",
            stat.S_IFBLK: "a device"}


@record
class Change:
    """``kind``: "A" added, "M" modified (content, type, mode or symlink target), "D"
    deleted; ``path``: relative to the directory, "/"-separated, a directory's ending
    with "/"; ``size``: the new size of a file (of a symlink: its target's length),
    None for a deletion or a directory; ``note``: what the commit does otherwise than
    the run did (a special file left out, set-id bits dropped), None: nothing."""

    kind: str
    path: str
    size: int | None = None
    note: str | None = None


def special_note(st: os.stat_result) -> str:
    return f"{_SPECIAL.get(stat.S_IFMT(st.st_mode), 'a special file')}: not committed"


class Listing(Walk):
    """The walk's hooks, recording each difference as a ``Change`` in ``found``."""

    def __init__(self, upper: str, target: str) -> None:
        super().__init__(upper, target)
        self.found: list[Change] = []

    def change(self, kind: str, node: Node) -> Change:
        ust = node.ust
        if kind == "D" or ust is None or stat.S_ISDIR(ust.st_mode):
            return Change(kind, node.path)
        if is_special(ust):
            return Change(kind, node.path, ust.st_size, special_note(ust))
        # (file capabilities, rare, cost an xattr call per file: only the commit looks)
        return Change(kind, node.path, ust.st_size, DROPPED if ust.st_mode & SETID else None)

    def delete(self, node: Node, change: object) -> None:
        self.found.append(change)  # type: ignore[arg-type]

    def place(self, node: Node, change: object) -> None:
        self.found.append(change)  # type: ignore[arg-type]

    def enter(self, node: Node, change: object) -> tuple[int | None, bool]:
        if change is not None:
            self.found.append(change)  # type: ignore[arg-type]
        return super().enter(node, change)


def changes(upper: str, target: str) -> list[Change]:
    """What applying ``upper`` to ``target`` would change, sorted by path."""
    walk = Listing(upper, target)
    walk.run()
    return sorted(walk.found, key=lambda change: change.path)


class _Measure(Walk):
    """The apparent size of the files a commit would write, a hard-linked file once
    (against no target: of every file of the layer)."""

    def __init__(self, upper: str, target: str | None) -> None:
        super().__init__(upper, target)
        self.seen: set[tuple[int, int]] = set()
        self.size = 0

    def place(self, node: Node, change: object) -> None:
        ust = node.ust
        if ust is not None and stat.S_ISREG(ust.st_mode) and (ust.st_dev, ust.st_ino) not in self.seen:
            self.seen.add((ust.st_dev, ust.st_ino))
            self.size += ust.st_size


def oversize(upper: str, target: str, limit: int) -> int | None:
    """The apparent size of what committing ``upper`` would write, when it is more
    than ``limit`` bytes (None: within it). A sparse file counts at its full size.
    First every file of the layer is summed (a stat each); only when that is over
    the limit are unchanged copy-ups, which write nothing, told apart."""
    for against in (None, target):
        measure = _Measure(upper, against)
        measure.run()
        if measure.size <= limit:
            return None
    return measure.size


def human_size(size: int | None) -> str:
    """512, 1.2K, 3.4M, 1.0G; "-" for none."""
    if size is None:
        return "-"
    if size < 1024:
        return str(size)
    value = float(size)
    for unit in _UNITS:
        value /= 1024
        if round(value, 1) < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f}{unit}"
    raise AssertionError("unreachable")


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def escape(path: str) -> str:
    """A path (or any name) fit for one line of a terminal: a byte that is not UTF-8
    as \\xNN, a control or invisible character (a newline, a bidirectional override)
    as \\n, \\t, \\r, \\xNN or \\uNNNN, a backslash doubled; the rest as it is."""
    if path.isprintable() and "\\" not in path:
        return path  # (the usual case: nothing to look at char by char)
    out = []
    for char in path:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif 0xDC80 <= code <= 0xDCFF:  # a byte os.fsdecode could not decode
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char.isprintable():
            out.append(char)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def shorten(text: str, most: int = 160) -> str:
    """``text`` cut in the middle to ``most`` characters (a path 4,000 long in a
    notice is noise): its start and end kept."""
    if len(text) <= most:
        return text
    return f"{text[:most // 2]}...{text[-(most // 2 - 3):]}"


def format_changes(changes: Iterable[Change]) -> list[str]:
    """One line per change: kind, size right-aligned, the path escaped, a note in
    brackets ("A     1.2K src/new.c", "A    35.0K bin/tool  [set-id bits ... dropped]")."""
    return [f"{change.kind} {human_size(change.size):>8} {escape(change.path)}"
            + (f"  [{change.note}]" if change.note else "") for change in changes]

