"""The gitlinks a git index records: where git recurses into a nested repository.

``git status``, ``diff`` and ``commit`` in a repository run git again in each nested
repository that its index records as a gitlink (mode 160000) and that has a ``.git``:
that repository's config and hooks count as much as the outer one's. The index is
read here, never by running git (git on a repository the command made would obey it).

Two readers. ``quick``, at start, on an index the user's git wrote (gitlinks there have
exactly the mode 0160000): a search for that mode's bytes, each hit checked as an
entry, so its cost is one pass of C code over the file. ``gitlinks``, at the end, on
an index the command may have written: every entry in turn as git reads it (versions
2, 3 and 4, SHA-1 or SHA-256, a split index's shared part), a gitlink being any mode
of type 0160000, as git tests it. What it cannot read is ``IndexError``'d: the caller
fails closed.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable

GITLINK = 0o160000
_TYPE = 0o170000
_HEADER = struct.Struct(">4sII")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_QUICK_MODE = _U32.pack(GITLINK)
_STAT_BYTES = 40  # ctime, mtime, dev, ino, mode, uid, gid, size: mode at 24
_EXTENDED = 0x4000
_NAME_MASK = 0xFFF
_MAX_GITLINKS = 4096  # read from one index at the end


class IndexFormatError(ValueError):
    """The index is not one git would read as this parser does."""


def quick(data: bytes, hash_size: int) -> list[bytes]:
    """The gitlinks of an index git wrote (a superset: a hit that is not an entry
    still has to pass the entry's checks, and yields at worst a path to look at)."""
    found: list[bytes] = []
    if data[:4] != b"DIRC" or len(data) < 12:
        return found
    if _U32.unpack_from(data, 4)[0] == 4:  # prefix-compressed names: the full walk
        try:
            return gitlinks(data, hash_size)[0]
        except IndexFormatError:
            return found
    at = data.find(_QUICK_MODE, 12 + 24)
    while at >= 0:
        name = _entry_name(data, at - 24, hash_size)
        if name is not None:
            found.append(name)
        at = data.find(_QUICK_MODE, at + 1)
    return found


def _entry_name(data: bytes, start: int, hash_size: int) -> bytes | None:
    flags_at = start + _STAT_BYTES + hash_size
    if start < 12 or flags_at + 2 > len(data):
        return None
    flags = _U16.unpack_from(data, flags_at)[0]
    name_at = flags_at + 2 + (2 if flags & _EXTENDED else 0)
    end = data.find(b"\0", name_at)
    if end < 0 or (flags & _NAME_MASK) not in (end - name_at, _NAME_MASK):
        return None
    return data[name_at:end]


def gitlinks(data: bytes, hash_size: int) -> tuple[list[bytes], bytes | None]:
    """(every gitlink, the shared index's hash if this is a split index's own part)."""
    if len(data) < 12 + hash_size:
        raise IndexFormatError("too short")
    signature, version, count = _HEADER.unpack_from(data)
    if signature != b"DIRC" or version not in (2, 3, 4):
        raise IndexFormatError(f"not an index of version 2, 3 or 4 ({signature!r}, {version})")
    end_of_entries = len(data) - hash_size  # the checksum closes the file
    walk = _walk_compressed if version == 4 else _walk
    try:
        found, at = walk(data, count, hash_size, version)
    except IndexFormatError:
        raise
    except (struct.error, ValueError, IndexError) as exc:
        raise IndexFormatError(f"truncated entries ({exc})") from None
    if at > end_of_entries:
        raise IndexFormatError("entries past the end")
    return found, _shared_index(data, at, end_of_entries, hash_size)


def _walk(data: bytes, count: int, hash_size: int, version: int) -> tuple[list[bytes], int]:
    """Versions 2 and 3: each entry padded to 8 bytes, its name's length in its flags.
    (The hot loop of the end check after a ``git add``: one unpack of the flags, one
    of the mode, no copy but a gitlink's name.)"""
    flags_at, at, found = _STAT_BYTES + hash_size, 12, []
    flags_of, mode_of = _U16.unpack_from, _U32.unpack_from
    for _ in range(count):
        flags = flags_of(data, at + flags_at)[0]
        if flags & _EXTENDED and version < 3:
            raise IndexFormatError("extended flags in a version 2 index")
        name_at = at + flags_at + (4 if flags & _EXTENDED else 2)
        length = flags & _NAME_MASK
        if length == _NAME_MASK:  # (git takes the name up to its NUL then)
            end = data.index(b"\0", name_at + length)
        else:
            end = name_at + length
            if data[end]:
                raise IndexFormatError("an entry's name is not as long as it says")
        if mode_of(data, at + 24)[0] & _TYPE == GITLINK:
            found.append(data[name_at:end])
        at += (end - at + 8) & ~7
    return found, at


def _walk_compressed(data: bytes, count: int, hash_size: int, version: int,
                     ) -> tuple[list[bytes], int]:
    """Version 4: no padding, each name the previous one's prefix plus its own part."""
    at, previous, found = 12, b"", []
    for _ in range(count):
        mode = _U32.unpack_from(data, at + 24)[0]
        flags = _U16.unpack_from(data, at + _STAT_BYTES + hash_size)[0]
        name_at = at + _STAT_BYTES + hash_size + (4 if flags & _EXTENDED else 2)
        strip, name_at = _varint(data, name_at)
        if strip > len(previous):
            raise IndexFormatError("a name shorter than its prefix")
        end = data.index(b"\0", name_at)
        name = previous[:len(previous) - strip] + data[name_at:end]
        at = end + 1
        if mode & _TYPE == GITLINK:
            found.append(name)
        previous = name
    return found, at


def _shared_index(data: bytes, at: int, end: int, hash_size: int) -> bytes | None:
    """The ``link`` extension's hash, naming the split index's shared part."""
    while at + 8 <= end:
        signature = data[at:at + 4]
        size = _U32.unpack_from(data, at + 4)[0]
        if signature == b"link":
            if size < hash_size:
                raise IndexFormatError("a short link extension")
            return data[at + 8:at + 8 + hash_size]
        at += 8 + size
    return None


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """git's offset varint (varint.c)."""
    c = data[at]
    at += 1
    value = c & 127
    while c & 128:
        c = data[at]
        at += 1
        value = ((value + 1) << 7) + (c & 127)
        if value > 1 << 32:
            raise IndexFormatError("a varint too large")
    return value, at


def shared_index_names(data: bytes, hash_size: int) -> list[str]:
    """The files a split index's ``link`` extension may name (``sharedindex.HASH``),
    found without reading the entries: each ``link`` whose size fits, and which ends
    where the checksum begins or another extension does (a name holding "link" is
    followed by more name, not by such a size)."""
    names, end = [], len(data) - hash_size
    at = data.find(b"link", 12)
    while at >= 0:
        if at + 8 + hash_size <= end:
            size = _U32.unpack_from(data, at + 4)[0]
            after = at + 8 + size
            if size >= hash_size and after <= end and (after == end or data[after:after + 4].isalpha()):
                names.append("sharedindex." + data[at + 8:at + 8 + hash_size].hex())
        at = data.find(b"link", at + 1)
    return names


def read_gitlinks(read: Callable[[str], bytes | None], sizes: tuple[int, ...], limit: int,
                  ) -> list[bytes] | None:
    """The gitlinks of an index and of its shared part (``read(name)``: a file of its
    git directory, at most ``limit`` bytes), read with each hash size (the union of
    those that read, when the repository's is not known); None if none does."""
    data = read("index")
    if data is None:
        return None
    links: list[bytes] = []
    understood = False
    for size in sizes:
        try:
            found, shared = gitlinks(data, size)
        except IndexFormatError:
            continue
        understood = True
        links += found
        more = read("sharedindex." + shared.hex()) if shared is not None else None
        try:
            links += gitlinks(more, size)[0] if more else []
        except IndexFormatError:
            return None
    return list(dict.fromkeys(links))[:_MAX_GITLINKS] if understood else None
